"""Lifecycle of the local control plane, driven by kwokctl's binary runtime.

kwokctl already generates the PKI, the admin kubeconfig and the component
flags, and supervises etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the kwok controller as plain processes; we only hand it
binaries we built from the Go module proxy, our kwok stages, and feature gates
when the upstream gang feature is wanted for comparison. The devices come
from dra-example-driver's kubelet plugin, one process per worker that we
start and stop with the cluster, or from the `fakegpu` stand-in.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from kubernetes_asyncio import client, config

from phalanx_dev.localcluster import dradriver, fakegpu, jobset, kueue, lws, processes, realnodes
from phalanx_dev.localcluster.sidecontroller import Exited, SideController

KUBE_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
CONTAINERD_VERSION = "v2.4.2"
HERE = Path(__file__).parent
UPSTREAM_GANG_GATES = "GenericWorkload=true,WorkloadWithJob=true,DRAWorkloadResourceClaims=true"
UPSTREAM_GANG_RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
# Creating a cluster again after a component lost its port to another cluster started at the same moment.
PORT_ATTEMPTS = 3
# Each plugin process holds ~40-43 MiB resident; past this many workers the stand-in publishes the slices unless asked otherwise.
MAX_DRIVER_WORKERS = 16

SliceSource = Literal["dra-example-driver", "fakegpu"]


class PortTaken(RuntimeError):
    """A component of the cluster could not bind the port kwokctl gave it."""


def cache_dir() -> Path:
    return Path(os.environ.get("PHALANX_CACHE", Path.home() / ".cache" / "phalanx"))


@dataclass(frozen=True)
class ClusterSpec:
    """The article's shape by default: a tainted control-plane node and 3 workers x 2 GPUs.

    `driver` says who publishes the ResourceSlices: dra-example-driver's own
    plugin (the default up to MAX_DRIVER_WORKERS workers) or the `fakegpu`
    stand-in (the default beyond, for simulated clusters of hundreds of nodes).
    `real_nodes` adds nodes with a kubelet and containerd that run containers
    (`realnodes`), each with the same GPUs from the driver's plugin, beside the
    `workers` kwok nodes; they need root. `jobset` runs JobSet's controller
    beside the control plane (`jobset`), `kueue` Kueue's controller manager
    (`kueue`), with `kueue_pods_ready` as its waitForPodsReady (None: off),
    `lws` LeaderWorkerSet's controller (`lws`).
    """

    name: str = "phalanx"
    workers: int = 3
    gpus_per_worker: int = 2
    control_plane_node: bool = True
    upstream_gang: bool = False
    node_shape: fakegpu.NodeShape = field(default_factory=fakegpu.NodeShape)
    driver: SliceSource | None = None
    real_nodes: int = 0
    jobset: bool = False
    lws: bool = False
    kueue_pods_ready: kueue.PodsReady | None = kueue.DOCUMENTED  # before `kueue`, which names the module until then
    kueue: bool = False
    controller_qps: int | None = None
    """kube-controller-manager's `--kube-api-qps` (burst 1.5x): each of its controllers' client is limited to 20
    requests/s by default, which paces a Job's pods and their claims; None leaves the default."""
    node_lease_parallelism: int | None = None
    """Node Leases kwok renews at once (its `nodeLeaseParallelism`, 4 by default); None leaves the default. Each of
    a real cluster's kubelets renews its own; with 4 at a time, 5,000 fake nodes on a loaded API server renew too
    late and are marked NotReady."""
    node_monitor_grace: str | None = None
    """kube-controller-manager's `--node-monitor-grace-period` (kwokctl's 3m20s when None): how long a node may go
    without renewing its Lease before it is marked NotReady, as the controller manager counts it."""

    @property
    def node_count(self) -> int:
        return self.workers + self.real_nodes + (1 if self.control_plane_node else 0)

    @property
    def slice_source(self) -> SliceSource:
        if self.driver is not None:
            return self.driver
        return "dra-example-driver" if self.workers <= MAX_DRIVER_WORKERS else "fakegpu"


def build_binaries(
    *, real_nodes: bool = False, jobset_controller: bool = False, kueue_manager: bool = False, lws_controller: bool = False
) -> Path:
    """Build (once; cached by version) and return the directory of the control-plane binaries.

    The same step builds dra-example-driver's kubelet plugin, beside them (`driver_binary`), and with
    `real_nodes` the kubelet and containerd (`node_binaries`), with `jobset_controller` JobSet's (`jobset_release`),
    with `kueue_manager` Kueue's (`kueue_release`), with `lws_controller` LeaderWorkerSet's (`lws_release`).
    """
    env = dict(os.environ, KUBE_VERSION=KUBE_VERSION, ETCD_VERSION=ETCD_VERSION, KWOK_VERSION=KWOK_VERSION)
    env.update(CONTAINERD_VERSION=CONTAINERD_VERSION, PHALANX_REAL_NODES="1" if real_nodes else "0")
    env.update(JOBSET_VERSION=jobset.VERSION, PHALANX_JOBSET="1" if jobset_controller else "0")
    env.update(LWS_VERSION=lws.VERSION, PHALANX_LWS="1" if lws_controller else "0")
    env.update(KUEUE_VERSION=kueue.VERSION, PHALANX_KUEUE="1" if kueue_manager else "0")
    # the interpreter running Phalanx has pip (its venv's), which installs a Go toolchain where the machine has none
    env.update(DRA_DRIVER_VERSION=dradriver.VERSION, PHALANX_CACHE=str(cache_dir()), PYTHON=sys.executable)
    out = subprocess.run(["bash", str(HERE / "build-kube.sh")], env=env, check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def driver_binary() -> Path:
    build_binaries()
    return cache_dir() / "bin" / f"dra-example-driver-{dradriver.VERSION}" / dradriver.BINARY


def jobset_release() -> Path:
    """JobSet's controller binary, with its release's CRD (crd.yaml) and webhook configurations (webhooks.yaml)."""
    build_binaries(jobset_controller=True)
    return cache_dir() / "bin" / f"jobset-{jobset.VERSION}"


def lws_release() -> Path:
    """LeaderWorkerSet's controller binary, with its release's CRDs (crd.yaml) and webhook configurations (webhooks.yaml)."""
    build_binaries(lws_controller=True)
    return cache_dir() / "bin" / f"lws-{lws.VERSION}"


def kueue_release() -> Path:
    """Kueue's controller manager binary, with its release's CRDs (crds.yaml) and webhook configurations (webhooks.yaml)."""
    build_binaries(kueue_manager=True)
    return cache_dir() / "bin" / f"kueue-{kueue.VERSION}"


def node_binaries() -> Path:
    """containerd, its runc shim and ctr (the kubelet is with the control plane's binaries)."""
    return cache_dir() / "bin" / f"containerd-{CONTAINERD_VERSION}"


class LocalCluster:
    """One named cluster under the cache directory; `up` and `down` are idempotent."""

    def __init__(self, spec: ClusterSpec = ClusterSpec()) -> None:
        self.spec = spec
        self.workdir = cache_dir() / "kwok"
        self.bin_dir: Path | None = None
        self._plugins: dict[str, int] = {}
        """Node -> pid of the dra-example-kubeletplugin this process started for it."""

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.spec.name

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig.yaml"

    def _env(self) -> dict[str, str]:
        bin_dir = self.bin_dir or build_binaries(real_nodes=self.spec.real_nodes > 0)
        self.bin_dir = bin_dir
        env = dict(os.environ)
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            KWOK_WORKDIR=str(self.workdir),
            KWOK_KUBE_VERSION=KUBE_VERSION,
            KWOK_RUNTIME="binary",
            KWOK_KUBECTL_BINARY=str(bin_dir / "kubectl"),
            KWOK_KUBE_APISERVER_BINARY=str(bin_dir / "kube-apiserver"),
            KWOK_KUBE_CONTROLLER_MANAGER_BINARY=str(bin_dir / "kube-controller-manager"),
            KWOK_KUBE_SCHEDULER_BINARY=str(bin_dir / "kube-scheduler"),
            KWOK_ETCD_BINARY=str(bin_dir / "etcd"),
            KWOK_CONTROLLER_BINARY=str(bin_dir / "kwok"),
            KUBECONFIG=str(self.kubeconfig),
        )
        return env

    def env(self) -> dict[str, str]:
        """Environment for a process that should talk to this cluster (KUBECONFIG, kubectl on PATH)."""
        return self._env()

    def exists(self) -> bool:
        return self.kubeconfig.exists()

    def answers(self) -> bool:
        """The API server of an existing cluster is up and ready (its state may outlive its processes)."""
        if not self.exists():
            return False
        return self.kubectl("get", "--raw", "/readyz", "--request-timeout=5s", check=False).returncode == 0

    def up(self) -> None:
        env = self._env()
        started = time.monotonic()
        dradriver.stop(self.kubeconfig)
        jobset.stop(self.kubeconfig)
        lws.stop(self.kubeconfig)
        kueue.stop(self.kubeconfig)
        realnodes.stop_all(self.cluster_dir, node_binaries())
        if self.exists():
            self._kwokctl(env, "delete", "cluster")
        args = [
            "create",
            "cluster",
            "--runtime",
            "binary",
            "--kubeconfig",
            str(self.kubeconfig),
            "--config",
            str(self._kwokctl_config()),
            "--config",
            str(HERE / "stages.yaml"),
            "--kube-apiserver-binary",
            env["KWOK_KUBE_APISERVER_BINARY"],
            "--kube-controller-manager-binary",
            env["KWOK_KUBE_CONTROLLER_MANAGER_BINARY"],
            "--kube-scheduler-binary",
            env["KWOK_KUBE_SCHEDULER_BINARY"],
            "--etcd-binary",
            env["KWOK_ETCD_BINARY"],
            "--kwok-controller-binary",
            env["KWOK_CONTROLLER_BINARY"],
            "--wait",
            "3m",
        ]
        if self.spec.upstream_gang:
            args += ["--kube-feature-gates", UPSTREAM_GANG_GATES, "--kube-runtime-config", UPSTREAM_GANG_RUNTIME_CONFIG]
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._kwokctl(env, *args)
            try:
                asyncio.run(self._populate())
                break
            except PortTaken as exc:
                if attempt == PORT_ATTEMPTS:
                    raise
                _log(f"{exc}; creating cluster {self.spec.name!r} again ({attempt + 1} of {PORT_ATTEMPTS})")
                dradriver.stop(self.kubeconfig)
                jobset.stop(self.kubeconfig)
                lws.stop(self.kubeconfig)
                kueue.stop(self.kubeconfig)
                realnodes.stop_all(self.cluster_dir, node_binaries())
                self._kwokctl(env, "delete", "cluster")
        devices = f"slices from {self.spec.slice_source}" if self.spec.gpus_per_worker > 0 else "no devices"
        _log(f"cluster {self.spec.name!r} up in {time.monotonic() - started:.1f}s, {devices} (kubeconfig {self.kubeconfig})")

    def _kwokctl_config(self) -> Path:
        """kwokctl.yaml, with the controller manager's client limits and node grace period and kwok's lease
        parallelism when the spec sets them (a file beside the cluster)."""
        if self.spec.controller_qps is None and self.spec.node_lease_parallelism is None and self.spec.node_monitor_grace is None:
            return HERE / "kwokctl.yaml"
        docs = [yaml.safe_load((HERE / "kwokctl.yaml").read_text())]
        (manager,) = [patch for patch in docs[0]["componentsPatches"] if patch["name"] == "kube-controller-manager"]
        if (qps := self.spec.controller_qps) is not None:
            manager["extraArgs"] += [{"key": "kube-api-qps", "value": str(qps)}, {"key": "kube-api-burst", "value": str(qps * 3 // 2)}]
        if self.spec.node_monitor_grace is not None:
            manager["extraArgs"].append({"key": "node-monitor-grace-period", "value": self.spec.node_monitor_grace})
        if self.spec.node_lease_parallelism is not None:
            # a KwokConfiguration given is taken whole, its defaults not applied: kwok v0.8's are spelled out here
            options = {
                "cidr": "10.0.0.1/24",
                "enableDebuggingHandlers": True,
                "enableProfilingHandler": True,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": self.spec.node_lease_parallelism,
            }
            docs.append({"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options})
        path = self.workdir / f"{self.spec.name}-kwokctl.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(docs))
        return path

    def down(self) -> None:
        """Every process of the cluster stopped and its state deleted. The driver's plugins are stopped, but its slices
        are not deleted first: they go with the cluster's etcd (deleting a 5,000-node cluster's slices one by one held
        the scale tier's teardown for minutes)."""
        dradriver.stop(self.kubeconfig)
        jobset.stop(self.kubeconfig)
        lws.stop(self.kubeconfig)
        kueue.stop(self.kubeconfig)
        if not self.cluster_dir.exists():
            return
        realnodes.stop_all(self.cluster_dir, node_binaries())
        self._kwokctl(self._env(), "delete", "cluster")
        shutil.rmtree(self.cluster_dir, ignore_errors=True)

    def restart_apiserver(self, *, compact: bool = False, down: float = 0.0, timeout: float = 120) -> int:
        """Kill kube-apiserver and start it again with the same flags, port and etcd; returns etcd's revision at the restart.

        With `compact`, etcd's history is compacted to that revision while the server is down, so a watch
        resumed from any older resourceVersion is answered 410 Gone, for real. With `down`, the server stays
        down that many seconds before it is started again: every request meanwhile is refused a connection,
        an outage clients must outlive. kwokctl can only stop the whole
        cluster, so the process is restarted from its own command line, environment and directory, and its
        pid file is updated so `down` still stops it.
        """
        pid_file = self.cluster_dir / "pids" / "kube-apiserver.pid"
        pid = int(pid_file.read_text().strip())
        proc = Path(f"/proc/{pid}")
        argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        env = dict(e.split("=", 1) for e in (proc / "environ").read_bytes().decode().split("\0") if "=" in e)
        cwd = os.readlink(proc / "cwd")
        etcd = next(a.split("=", 1)[1].split(",")[0] for a in argv if a.startswith("--etcd-servers="))
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while proc.exists() and "zombie" not in (proc / "status").read_text().lower():
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-apiserver (pid {pid}) still running {timeout}s after SIGKILL")
            time.sleep(0.1)
        revision = int(_etcd(etcd, "range", {"key": base64.b64encode(b"/registry").decode()})["header"]["revision"])
        if compact:
            _etcd(etcd, "compaction", {"revision": revision, "physical": True})
        time.sleep(down)
        log = self.cluster_dir / "logs" / "kube-apiserver.log"

        def launch() -> tuple[subprocess.Popen[bytes], int]:
            start = log.stat().st_size if log.exists() else 0
            with log.open("ab") as out:
                server = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            pid_file.write_text(str(server.pid))
            return server, start

        server, start = launch()
        while (ready := self.kubectl("get", "--raw", "/readyz", check=False)).returncode != 0:
            tail = log.read_bytes()[start:][-3000:].decode(errors="replace")
            if server.poll() is not None and "address already in use" in tail and time.monotonic() < deadline:
                time.sleep(0.5)  # the killed server's port is not free yet: try again, as a restarted static pod would
                server, start = launch()
                continue
            if time.monotonic() > deadline or server.poll() is not None:
                raise TimeoutError(f"kube-apiserver not ready after its restart (exit {server.poll()}): {ready.stderr}\n{tail}")
            time.sleep(0.3)
        gone = [c for c in ("kube-controller-manager", "kube-scheduler") if not _alive(self.cluster_dir / "pids" / f"{c}.pid")]
        if gone:
            raise RuntimeError(f"{', '.join(gone)} exited while kube-apiserver was down")
        return revision

    def stop_driver(self) -> None:
        """Stop every plugin, then delete the driver's slices: they outlive the plugin, which would publish them again if still up."""
        dradriver.stop(self.kubeconfig)
        if self.exists():
            selector = f"--field-selector=spec.driver={dradriver.DRIVER}"
            self.kubectl("delete", "resourceslices", selector, "--request-timeout=20s", "--timeout=30s", check=False)

    def driver_processes(self) -> dict[str, int]:
        """Live dra-example-kubeletplugin processes of this cluster, by node name."""
        return dradriver.running(self.kubeconfig)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = self._env()
        return subprocess.run([env["KWOK_KUBECTL_BINARY"], *args], env=env, input=stdin, text=True, capture_output=True, check=check)

    def service_account_kubeconfig(self, namespace: str, name: str, *, duration: str = "24h") -> Path:
        """A kubeconfig that authenticates as a ServiceAccount through a TokenRequest token."""
        self.kubectl("create", "namespace", namespace, check=False)
        self.kubectl("-n", namespace, "create", "serviceaccount", name, check=False)
        token = self.kubectl("-n", namespace, "create", "token", name, "--duration", duration).stdout.strip()
        admin = yaml.safe_load(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]["cluster"]
        if "certificate-authority" in cluster:
            ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
        else:
            ca = cluster["certificate-authority-data"]
        user = f"system:serviceaccount:{namespace}:{name}"
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.spec.name, "cluster": {"server": cluster["server"], "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": self.spec.name, "user": user}}],
            "current-context": user,
        }
        path = self.cluster_dir / f"sa-{namespace}-{name}.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    def _kwokctl(self, env: dict[str, str], *args: str) -> None:
        cmd = [str(Path(env["KWOK_KUBECTL_BINARY"]).parent / "kwokctl"), "--name", self.spec.name, *args]
        proc = subprocess.run(cmd, env=env, text=True, capture_output=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def check_ports(self) -> None:
        """Raise PortTaken when a component lost its port to another process: kwokctl picks free ports, then the
        components bind them a moment later, so two clusters created at once can both pick one."""
        for log in sorted((self.cluster_dir / "logs").glob("*.log")):
            if "address already in use" in log.read_text(errors="replace")[-20000:]:
                raise PortTaken(f"{log.stem} of cluster {self.spec.name!r} found its port taken ({log})")

    async def _populate(self) -> None:
        await self.wait_ready(check=self.check_ports)
        spec = self.spec
        async with await self.api_client() as api:
            workers = await fakegpu.create_nodes(api, workers=spec.workers, control_plane=spec.control_plane_node, shape=spec.node_shape)
            await fakegpu.create_once(client.ResourceV1Api(api).create_device_class, dradriver.device_class())
            if spec.gpus_per_worker > 0 and spec.slice_source == "fakegpu":
                await fakegpu.publish_slices(api, workers, spec.gpus_per_worker)
            elif spec.gpus_per_worker > 0:
                self._plugins.update(dradriver.start(driver_binary(), self.cluster_dir, self.kubeconfig, workers, spec.gpus_per_worker))
            real = self.start_real_nodes() if spec.real_nodes else []
            await _wait_nodes_ready(client.CoreV1Api(api), spec.node_count, self.check_ports)
            if spec.gpus_per_worker > 0:
                await self._wait_slices(client.ResourceV1Api(api), sorted([*workers, *(n.name for n in real)]))
        if spec.jobset:
            self.start_jobset()
        if spec.lws:
            self.start_lws()
        if spec.kueue:
            self.start_kueue()

    def start_jobset(self) -> None:
        """JobSet's CRD, its controller, then its webhooks once it serves them (their failurePolicy is Fail)."""
        self._start_beside(jobset.CONTROLLER, jobset_release(), f"jobsets.{jobset.API_GROUP}")

    def start_lws(self) -> None:
        """LeaderWorkerSet's CRDs, its controller, then its webhooks once it serves them (their failurePolicy is Fail)."""
        self._start_beside(lws.CONTROLLER, lws_release(), f"leaderworkersets.{lws.API_GROUP}")

    def _start_beside(self, controller: SideController, release: Path, crd: str) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(release / "crd.yaml"))
        self._wait_established(crd)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            controller.stop(self.kubeconfig)
            # its ports are chosen free, then bound a moment later: another process may take one in between
            _, hooks = controller.start(release, self.cluster_dir, self.kubeconfig, tuple(processes.free_ports(2)))
            try:
                controller.wait_ready(self.cluster_dir, self.kubeconfig)
                break
            except Exited as exc:
                if attempt == PORT_ATTEMPTS:
                    raise
                _log(f"{exc}; starting it again ({attempt + 1} of {PORT_ATTEMPTS})")
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(doc) for doc in hooks))

    def start_kueue(self) -> None:
        """Kueue's CRDs, its namespace, its manager, then its webhooks once it serves them (their failurePolicy is Fail)."""
        release = kueue_release()
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(release / "crds.yaml"))
        for crd in kueue.CRDS:
            self._wait_established(f"{crd}.{kueue.API_GROUP}")
        self.kubectl("create", "namespace", "kueue-system", check=False)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            kueue.stop(self.kubeconfig)
            # its ports are chosen free, then bound a moment later: another process may take one in between
            ports = tuple(processes.free_ports(2))
            _, hooks = kueue.start(release, self.cluster_dir, self.kubeconfig, ports, self.spec.kueue_pods_ready)
            try:
                kueue.wait_ready(self.cluster_dir, self.kubeconfig)
                break
            except kueue.Exited as exc:
                if attempt == PORT_ATTEMPTS:
                    raise
                _log(f"{exc}; starting it again ({attempt + 1} of {PORT_ATTEMPTS})")
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(doc) for doc in hooks))

    def start_real_nodes(self) -> list[realnodes.RealNode]:
        """The kubelets, and on each the driver's plugin where the kubelet looks for it and containerd reads its CDI specs."""
        nodes = realnodes.start(
            self.spec.name,
            self.cluster_dir,
            self.kubeconfig,
            self.api_port,
            self.spec.real_nodes,
            bins=self.bin_dir or build_binaries(real_nodes=True),
            node_bins=node_binaries(),
            images_dir=cache_dir() / "images",
        )
        if self.spec.gpus_per_worker > 0:
            started = dradriver.start(
                driver_binary(),
                self.cluster_dir,
                self.kubeconfig,
                [n.name for n in nodes],
                self.spec.gpus_per_worker,
                kubelet={n.name: n for n in nodes},
            )
            self._plugins.update(started)
        return nodes

    def _wait_established(self, crd: str, timeout: float = 60) -> None:
        """`kubectl wait` fails on a CRD so new it has no status yet, so this polls."""
        deadline = time.monotonic() + timeout
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        while self.kubectl("get", "crd", crd, "-o", f"jsonpath={jsonpath}", check=False).stdout.strip() != "True":
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd} not Established after {timeout:.0f}s")
            time.sleep(0.2)

    @property
    def api_port(self) -> int:
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return int(server.rsplit(":", 1)[1])

    def _dead_plugins(self, workers: list[str]) -> dict[str, str]:
        """Workers whose plugin has ended, and how. A plugin this process started is judged by its pid, not only by
        the name it is found under: at the suite's start three were once reported gone with empty logs."""
        alive = self.driver_processes()
        dead = {}
        for worker in workers:
            if worker in alive:
                continue
            pid = self._plugins.get(worker)
            status = processes.exit_status(pid) if pid is not None else "not running"
            if status is not None:
                dead[worker] = status
        return dead

    async def _wait_slices(self, resource: client.ResourceV1Api, workers: list[str], timeout: float = 120) -> None:
        """Every worker's pool published whole; a plugin that died is reported with its log, not waited for."""
        deadline = time.monotonic() + timeout
        while True:
            slices = (await resource.list_resource_slice(field_selector=f"spec.driver={dradriver.DRIVER}")).items
            devices = {s.spec.node_name: len(s.spec.devices or []) for s in slices}
            if all(devices.get(w) == self.spec.gpus_per_worker for w in workers):
                return
            if self.spec.slice_source == "dra-example-driver" and (dead := self._dead_plugins(workers)):
                first = sorted(dead)[0]
                log = dradriver.node_dir(self.cluster_dir, first) / "plugin.log"
                tail = log.read_text()[-3000:] if log.exists() else ""
                how = ", ".join(f"{node} ({status})" for node, status in sorted(dead.items()))
                raise RuntimeError(f"dra-example-kubeletplugin exited on {how}; {log}:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"ResourceSlices after {timeout}s: {devices}, want {self.spec.gpus_per_worker} devices on each of {workers}"
                )
            await asyncio.sleep(0.5)

    async def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    async def wait_ready(self, timeout: float = 120, check: Callable[[], None] | None = None) -> None:
        """The API server answers before its service account and namespace controllers have run."""
        deadline = time.monotonic() + timeout
        while True:
            if check is not None:
                check()
            proc = self.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "json", check=False)
            if proc.returncode == 0 and json.loads(proc.stdout).get("metadata"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster {self.spec.name!r} not ready after {timeout}s: {proc.stderr.strip()}")
            await asyncio.sleep(0.5)


async def _wait_nodes_ready(core: client.CoreV1Api, count: int, check: Callable[[], None], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        check()
        nodes = (await core.list_node()).items
        ready = [n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))]
        if len(ready) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ready)} of {count} nodes Ready after {timeout}s")
        await asyncio.sleep(0.5)


def _alive(pid_file: Path) -> bool:
    status = Path(f"/proc/{pid_file.read_text().strip()}/status")
    return status.exists() and "zombie" not in status.read_text().lower()


def _etcd(endpoint: str, call: str, body: dict[str, object]) -> dict[str, Any]:
    """One call to etcd's v3 JSON gateway (`range`, `compaction`): no etcdctl needed."""
    request = urllib.request.Request(f"{endpoint}/v3/kv/{call}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _log(message: str) -> None:
    print(f"localcluster: {message}", file=sys.stderr, flush=True)
