"""Fixtures shared by the integration tests (tests/) and the e2e suite (e2e/).

One cluster per test session, one namespace per test. By default the cluster
is the local control plane, started here and torn down at the end even when a
test fails: 3 workers x 2 GPUs whose ResourceSlices are published by
dra-example-driver's own kubelet plugin, one process per worker. With
PHALANX_E2E_KUBECONFIG set, the suite runs against that cluster instead (Kind
with the real dra-example-driver, for instance) and starts nothing.

Local clusters are named from PHALANX_TEST_CLUSTER (default `phalanx-test`;
tests that need a cluster of their own add a suffix), so two checkouts on one
machine can run their suites side by side.
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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc
from phalanx_dev.localcluster.cluster import build_binaries, cache_dir

# the liveness oracle after every integration test (tests/integration/liveness_plugin.py, importable from
# tests/integration as every helper of the test tree is)
pytest_plugins = ("liveness_plugin",)

ROOT = Path(__file__).parent
WORKLOADS = ROOT / "e2e" / "workloads"
OPERATOR_NAMESPACE = operatorproc.NAMESPACE
TEST_CLUSTER = os.environ.get("PHALANX_TEST_CLUSTER", "phalanx-test")


def cluster_name(suffix: str = "") -> str:
    """The name of a local test cluster: the session's, or a dedicated one's with a suffix."""
    return f"{TEST_CLUSTER}-{suffix}" if suffix else TEST_CLUSTER


def wait_for(probe: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Poll until `probe` returns something truthy, and return it; fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while not (result := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout}s")
        time.sleep(0.2)
    return result


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

    def explain(self, name: str, namespace: str, *extra: str) -> str:
        """`kubectl phalanx explain`: kubectl finds the `kubectl-phalanx` executable the install put beside python on PATH."""
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PATH=path)
        args = [self.kubectl_binary, "phalanx", "explain", name, "-n", namespace, *extra]
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (CI timeouts, `kill`) unwinds like Ctrl-C, so fixtures still stop every process they started."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


_NOISE = ("aiohttp.access", "Webhook '", "Handler 'job_event' succeeded")
_SET_UP = pytest.StashKey[float]()
_SCHEDULER_AT = pytest.StashKey[dict[Path, int]]()


def _scheduler_logs() -> list[Path]:
    return sorted((cache_dir() / "kwok" / "clusters").glob(f"{TEST_CLUSTER}*/logs/kube-scheduler.log"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SET_UP] = time.time()
    item.stash[_SCHEDULER_AT] = {log: log.stat().st_size for log in _scheduler_logs() if log.exists()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the tail of every operator log written while it ran, and kube-scheduler's
    errors, warnings and binding lines since it began: CI keeps the report, not the logs, which the fixtures delete."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for log in sorted(Path(tempfile.gettempdir()).glob(f"phalanx-operator-{TEST_CLUSTER}*.log")):
        with contextlib.suppress(OSError):
            if log.stat().st_mtime >= item.stash.get(_SET_UP, call.start):
                lines = [line for line in log.read_text(errors="replace").splitlines() if not any(n in line for n in _NOISE)]
                report.sections.append((f"operator log {log.name} (last 150 lines)", "\n".join(lines[-150:])))
    for log in _scheduler_logs():
        with contextlib.suppress(OSError), log.open(errors="replace") as f:
            f.seek(item.stash.get(_SCHEDULER_AT, {}).get(log, 0))
            lines = [line.rstrip() for line in f if line[:1] in "EW" or "bind" in line.lower() or "unreserve" in line.lower()]
            if lines:
                report.sections.append(
                    (f"kube-scheduler {log.parent.parent.name}: errors, warnings, binds (last 60)", "\n".join(lines[-60:]))
                )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("PHALANX_E2E_KUBECONFIG")
    if external:
        yield Cluster(Path(external), os.environ.get("KUBECTL", "kubectl"), None)
        return
    local = LocalCluster(ClusterSpec(name=cluster_name(), driver="dra-example-driver", jobset=True, lws=True))
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

    handle: operatorproc.OperatorProcess | None

    @property
    def log(self) -> Path | None:
        return self.handle.log if self.handle else None

    def logs(self) -> str:
        return self.handle.logs() if self.handle else ""


def started_operator(
    local: LocalCluster, *, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> Iterator[operatorproc.OperatorProcess]:
    """An operator of a fixture's own (flags or environment of its own), stopped when the fixture ends, its log
    deleted unless PHALANX_KEEP_LOGS: `yield from started_operator(cluster.local, ...)`."""
    handle = operatorproc.start(local, ROOT, extra_args=extra_args, env=env)
    try:
        yield handle
    finally:
        handle.stop()
        if os.environ.get("PHALANX_KEEP_LOGS"):
            print(f"operator log: {handle.log}", file=sys.stderr)
        else:
            handle.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[Operator]:
    if cluster.local is None:
        yield Operator(None)  # deployed into that cluster from manifests/
        return
    running = Operator(operatorproc.start(cluster.local, ROOT))
    try:
        yield running
    finally:
        # the one running now: a test that stopped the module's operator for its own sets the one it started again
        handle = running.handle
        assert handle is not None
        handle.stop()
        if os.environ.get("PHALANX_KEEP_LOGS"):
            print(f"operator log: {handle.log}", file=sys.stderr)
        else:
            handle.log.unlink(missing_ok=True)


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
        # pods stop in their grace period, as on a kubelet; what a test leaves behind is cut short
        cluster.kubectl("delete", "jobs,pods", "--all", "-n", name, "--wait=false", "--grace-period=0", "--force", check=False)
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
