"""Run the operator beside the local control plane, as its ServiceAccount, the way the tests and the demo need it.

The operator process gets the kubeconfig of the `phalanx` ServiceAccount
bound to the ClusterRole in `manifests/rbac.yaml`, never the admin's, so every
run proves the RBAC. It is ready when a gang Job sent through the real
admission chain (server-side dry run) comes back gated.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from phalanx.localcluster.cluster import LocalCluster

NAMESPACE = "phalanx-system"
_PROBE_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "readiness-probe", "annotations": {"scheduling.phalanx.dev/min-count": "1"}},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}},
}


def free_ports(count: int) -> list[int]:
    """Distinct free ports: all sockets stay bound until every port is chosen, so the kernel cannot hand one out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def logs(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def install(cluster: LocalCluster, repo: Path) -> None:
    """CRDs, namespace and RBAC from the repository's manifests, applied as admin."""
    cluster.kubectl("apply", "-k", str(repo / "crds"))
    cluster.kubectl("apply", "-f", str(repo / "manifests" / "namespace.yaml"), "-f", str(repo / "manifests" / "rbac.yaml"))


def start(
    cluster: LocalCluster, repo: Path, *, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None, timeout: float = 60
) -> OperatorProcess:
    """`env` adds to the operator's environment (the fault suite arms a crash point with it)."""
    install(cluster, repo)
    kubeconfig = cluster.service_account_kubeconfig(NAMESPACE, "phalanx")
    log = Path(tempfile.mkstemp(prefix=f"phalanx-operator-{cluster.spec.name}-", suffix=".log")[1])
    webhook_port, metrics_port, liveness_port = free_ports(3)
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
        *extra_args,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            args,
            env={**os.environ, **(env or {}), "KUBECONFIG": str(kubeconfig)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = OperatorProcess(process, log, metrics_port)
    try:
        _wait_admitting(cluster, handle, timeout)
    except BaseException:
        handle.stop()
        raise
    return handle


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
