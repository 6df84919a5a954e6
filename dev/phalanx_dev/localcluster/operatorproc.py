"""Run the operator beside the local control plane, as its ServiceAccount, the way the tests and the demo need it.

The operator process gets the kubeconfig of the `phalanx` ServiceAccount
bound to the ClusterRole in `manifests/rbac.yaml`, never the admin's, so every
run proves the RBAC. It is ready when a gang Job sent through the real
admission chain (server-side dry run) comes back gated.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from phalanx_dev.localcluster.cluster import LocalCluster
from phalanx_dev.localcluster.processes import free_ports

NAMESPACE = "phalanx-system"
WEBHOOK_CONFIGURATION = "jobs.scheduling.phalanx.dev"
# The ServiceAccount token of the operator `./task up` leaves running; `./task up` after `./task down` makes a new one.
BACKGROUND_TOKEN = "720h"
_PROBE_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "readiness-probe", "annotations": {"scheduling.phalanx.dev/min-count": "1"}},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}},
}


def port_file(cluster_dir: Path) -> Path:
    """Where the operator started beside a local cluster records its metrics port (`phalanx metrics` reads it)."""
    return cluster_dir / "operator-metrics-port"


@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    readiness_port: int = 0
    webhook_port: int = 0
    port_file: Path | None = None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.readiness_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def metric(self, name: str) -> float:
        """One sample of its /metrics, by name and labels as exposed (`x_total` or `x_total{a="b"}`); 0 while absent."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def kill(self) -> None:
        """SIGKILL, as a node or OOM kill does: no cleanup, the Lease is not handed over."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def logs(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.port_file is not None:
            self.port_file.unlink(missing_ok=True)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


LOCAL_RBAC = Path(__file__).parent / "local-rbac.yaml"


def install(cluster: LocalCluster, repo: Path) -> None:
    """CRDs, namespace, RBAC and the admission policy from the repository's manifests, applied as admin, and the
    local mode's own right to write its webhook configurations (URL webhooks on loopback, not the static ones)."""
    cluster.kubectl("apply", "-k", str(repo / "crds"))
    manifests = repo / "manifests"
    files = [manifests / "namespace.yaml", manifests / "rbac.yaml", manifests / "admission-policy.yaml", LOCAL_RBAC]
    cluster.kubectl("apply", *(arg for f in files for arg in ("-f", str(f))))


def start(
    cluster: LocalCluster,
    repo: Path,
    *,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60,
    webhook_port: int | None = None,
    advertise_port: int | None = None,
    log: Path | None = None,
    token_duration: str = "24h",
) -> OperatorProcess:
    """One replica; it logs to `log` (a fresh temporary file by default). Alone, it is started once it admits a
    gang Job; behind a balancer on `advertise_port` (several replicas), once its readiness endpoint says it serves. `env` adds to its environment (the fault
    suite arms a crash point with it)."""
    install(cluster, repo)
    kubeconfig = cluster.service_account_kubeconfig(NAMESPACE, "phalanx", duration=token_duration)
    if log is None:
        log = Path(tempfile.mkstemp(prefix=f"phalanx-operator-{cluster.spec.name}-", suffix=".log")[1])
    free_webhook, metrics_port, liveness_port, readiness_port = free_ports(4)
    webhook_port = webhook_port or free_webhook
    args = [
        sys.executable,
        "-m",
        "phalanx",
        "run",
        "--namespace",
        NAMESPACE,
        "--webhook-listen",
        "127.0.0.1",
        "--webhook-host",
        "127.0.0.1",
        "--webhook-port",
        str(webhook_port),
        "--liveness",
        f"http://127.0.0.1:{liveness_port}/healthz",
        "--metrics-port",
        str(metrics_port),
        "--metrics-listen",
        "127.0.0.1",
        "--readiness",
        f"http://127.0.0.1:{readiness_port}/readyz",
        *(("--webhook-advertise-port", str(advertise_port)) if advertise_port else ()),
        *extra_args,
    ]
    # its temporary files (the webhook's serving key) in the cluster's directory: one SIGKILLed (the fault suite) leaves
    # them to `down`, which deletes that directory, never to the machine's temp dir
    scratch = cluster.cluster_dir / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            args,
            env={**os.environ, **(env or {}), "KUBECONFIG": str(kubeconfig), "TMPDIR": str(scratch)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = OperatorProcess(process, log, metrics_port, readiness_port, webhook_port, port_file(cluster.cluster_dir))
    try:
        if advertise_port:
            _wait_ready(handle, timeout)
        else:
            _wait_admitting(cluster, handle, timeout)
    except BaseException:
        handle.stop()
        raise
    handle.port_file.write_text(f"{metrics_port}\n")  # for `phalanx metrics` (./task metrics)
    return handle


def _wait_ready(operator: OperatorProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not operator.ready():
        if operator.process.poll() is not None:
            raise RuntimeError(f"operator exited with {operator.process.returncode}:\n{operator.logs()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"operator not ready after {timeout}s:\n{operator.logs()}")
        time.sleep(0.3)


def _wait_admitting(cluster: LocalCluster, operator: OperatorProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    probe = json.dumps(_PROBE_JOB)
    while True:
        if operator.process.poll() is not None:
            raise RuntimeError(f"operator exited with {operator.process.returncode}:\n{operator.logs()}")
        proc = cluster.kubectl("create", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-", stdin=probe, check=False)
        if proc.returncode == 0 and json.loads(proc.stdout)["spec"]["template"]["spec"].get("schedulingGates"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"operator not admitting Jobs after {timeout}s: {proc.stderr}\n{operator.logs()}")
        time.sleep(0.5)


def webhook_configurations(cluster: LocalCluster) -> list[str]:
    """Phalanx's webhook configurations present in the cluster, as kind/name."""
    proc = cluster.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name")
    return [line for line in proc.stdout.split() if line.endswith(f"/{WEBHOOK_CONFIGURATION}")]


def state_file(cluster: LocalCluster) -> Path:
    return cluster.cluster_dir / "operator.json"


def start_background(cluster: LocalCluster, repo: Path, *, timeout: float = 60) -> OperatorProcess:
    """The operator of `./task up`: it outlives this process, logs to the cluster's operator.log, and is found again
    through operator.json (pid, ports) by `stop_background`, `background` and `./task logs`."""
    handle = start(cluster, repo, timeout=timeout, log=cluster.cluster_dir / "operator.log", token_duration=BACKGROUND_TOKEN)
    state = {"pid": handle.process.pid, "log": str(handle.log), "metrics_port": handle.metrics_port, "webhook_port": handle.webhook_port}
    state_file(cluster).write_text(json.dumps(state))
    return handle


def background(cluster: LocalCluster) -> dict | None:
    """The recorded background operator if it is still alive (a pid reused by another program does not count)."""
    path = state_file(cluster)
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if _is_operator(state["pid"]) else None


def stop_background(cluster: LocalCluster, timeout: float = 30) -> int | None:
    """SIGTERM the background operator's process group (a clean shutdown deletes its webhook configurations),
    SIGKILL after `timeout`; return the pid it had, or None when none was running."""
    state = background(cluster)
    state_file(cluster).unlink(missing_ok=True)
    port_file(cluster.cluster_dir).unlink(missing_ok=True)
    if state is None:
        return None
    pid = state["pid"]
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_operator(pid):
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        _reap(pid)
        time.sleep(0.2)
    return pid


def _is_operator(pid: int) -> bool:
    """A live (not zombie) `phalanx run` process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return stat[0] != "Z" and b"phalanx" in argv and b"run" in argv


def _reap(pid: int) -> None:
    """Collect the exit status when this process started the operator; another's child is reaped by its parent."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
