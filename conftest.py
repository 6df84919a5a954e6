"""Fixtures shared by the integration tests (tests/) and the e2e suite (e2e/).

One cluster per test session, one namespace per test. By default the cluster
is the local control plane, started here and torn down at the end even when a
test fails. With PHALANX_E2E_KUBECONFIG set, the suite runs against that
cluster instead (Kind with the real dra-example-driver, for instance) and
starts nothing.
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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.localcluster import ClusterSpec, LocalCluster
from phalanx.localcluster.cluster import build_binaries

ROOT = Path(__file__).parent
WORKLOADS = ROOT / "e2e" / "workloads"
OPERATOR_NAMESPACE = "phalanx-system"
GANG_PROBE_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "readiness-probe", "annotations": {"scheduling.phalanx.dev/min-count": "1"}},
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
        }
    },
}


@dataclass
class Cluster:
    """What a test may rely on: a kubeconfig and a matching kubectl."""

    kubeconfig: Path
    kubectl_binary: str
    local: LocalCluster | None

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        proc = subprocess.run([self.kubectl_binary, *args], env=env, input=stdin, text=True, capture_output=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("PHALANX_E2E_KUBECONFIG")
    if external:
        yield Cluster(Path(external), os.environ.get("KUBECTL", "kubectl"), None)
        return
    local = LocalCluster(ClusterSpec(name="phalanx-test"))
    try:
        local.up()
        handle = Cluster(local.kubeconfig, str(build_binaries() / "kubectl"), local)
        # Installed at once: the garbage collector only learns new CRDs on its 30 s discovery cycle.
        handle.kubectl("apply", "-k", str(ROOT / "crds"))
        yield handle
    finally:
        local.down()


@dataclass
class Operator:
    """The operator process, run with its ServiceAccount's kubeconfig (never as admin), so RBAC is proven."""

    process: subprocess.Popen[bytes] | None
    log: Path | None

    def logs(self) -> str:
        return self.log.read_text() if self.log else ""


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[Operator]:
    if cluster.local is None:
        yield Operator(None, None)  # deployed into that cluster from manifests/
        return
    cluster.kubectl("apply", "-k", str(ROOT / "crds"))
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"), "-f", str(ROOT / "manifests" / "rbac.yaml"))
    kubeconfig = cluster.local.service_account_kubeconfig(OPERATOR_NAMESPACE, "phalanx")
    log = Path(tempfile.mkstemp(prefix="phalanx-operator-", suffix=".log")[1])
    webhook_port, liveness_port = _free_port(), _free_port()
    args = [
        sys.executable, "-m", "phalanx", "run",
        "--namespace", OPERATOR_NAMESPACE,
        "--webhook-listen", "127.0.0.1",
        "--webhook-host", "127.0.0.1",
        "--webhook-port", str(webhook_port),
        "--liveness", f"http://127.0.0.1:{liveness_port}/healthz",
        "--metrics-port", str(_free_port()),
    ]  # fmt: skip
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    with log.open("wb") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    handle = Operator(process, log)
    try:
        _wait_admitting(cluster, handle)
        yield handle
    finally:
        _stop(process)
        if os.environ.get("PHALANX_KEEP_LOGS"):
            print(f"operator log: {log}", file=sys.stderr)
        else:
            log.unlink(missing_ok=True)


def _wait_admitting(cluster: Cluster, operator: Operator, timeout: float = 60) -> None:
    """Ready means a gang Job sent through the real admission chain comes back gated."""
    deadline = time.monotonic() + timeout
    probe = json.dumps(GANG_PROBE_JOB)
    while True:
        assert operator.process is not None
        if operator.process.poll() is not None:
            raise RuntimeError(f"operator exited with {operator.process.returncode}:\n{operator.logs()}")
        proc = cluster.kubectl("create", "--dry-run=server", "-n", "default", "-o", "json", "-f", "-", stdin=probe, check=False)
        if proc.returncode == 0 and json.loads(proc.stdout)["spec"]["template"]["spec"].get("schedulingGates"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"operator not admitting Jobs after {timeout}s: {proc.stderr}\n{operator.logs()}")
        time.sleep(0.5)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace, deleted and waited for, so the next test starts with every device free."""
    yield from _fresh_namespace(cluster)


@pytest.fixture(scope="module")
def module_namespace(cluster: Cluster) -> Iterator[str]:
    """One namespace for a module whose tests create nothing that outlives them (refused requests)."""
    yield from _fresh_namespace(cluster)


def _fresh_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "jobs,pods", "--all", "-n", name, "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        _wait_gone(cluster, name)


def _wait_gone(cluster: Cluster, namespace: str, timeout: float = 120) -> None:
    """Wait for what holds devices (pods, claims), not for the namespace object: its controller backs off for seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = cluster.kubectl("get", "pods,resourceclaims", "-n", namespace, "-o", "name", check=False).stdout.split()
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} still holds {left} after {timeout}s")
        time.sleep(0.3)
