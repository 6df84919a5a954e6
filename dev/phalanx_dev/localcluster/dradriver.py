"""The real dra-example-driver on kwok nodes: one kubelet plugin process per worker.

The plugin publishes its node's ResourceSlice through the API server at
start-up, the way it does on a real node; it needs no kubelet for that. On a
kwok node no kubelet ever calls its sockets; on a real node (`realnodes`) the
plugin's sockets are where that node's kubelet looks for them, and its CDI
specs where that node's containerd reads them, so NodePrepareResources runs
and the containers see their devices.

Processes are found by the cluster's kubeconfig in their environment
(`processes`), so `stop` works from any later process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from phalanx_dev.localcluster import processes

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
VERSION = "v0.4.0"
BINARY = "dra-example-kubeletplugin"
# sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107


def device_class() -> dict[str, Any]:
    """The DeviceClass of the driver's Helm chart (templates/deviceclass.yaml); the plugin does not create it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


class Kubelet(Protocol):
    """Where a real node's kubelet looks for plugins and its containerd for CDI specs."""

    @property
    def plugins(self) -> Path: ...
    @property
    def plugins_registry(self) -> Path: ...
    @property
    def cdi_dir(self) -> Path: ...


def node_dir(cluster_dir: Path, node: str) -> Path:
    return cluster_dir / "dra" / node


def plugin_env(cluster_dir: Path, kubeconfig: Path, node: str, devices: int, kubelet: Kubelet | None = None) -> dict[str, str]:
    """What the chart's DaemonSet sets, with per-node directories instead of the host's /var/lib/kubelet.

    Health and metrics ports stay off (-1) so plugins never compete for a port.
    """
    base = node_dir(cluster_dir, node)
    env = {
        "NODE_NAME": node,
        "NUM_DEVICES": str(devices),
        "KUBECONFIG": str(kubeconfig),
        "DRIVER_NAME": DRIVER,
        "DEVICE_PROFILE": "gpu",
        "CDI_ROOT": str(base / "cdi"),
        "KUBELET_PLUGINS_DIRECTORY_PATH": str(base / "plugins"),
        "KUBELET_REGISTRAR_DIRECTORY_PATH": str(base / "registry"),
        "HEALTHCHECK_PORT": "-1",
        "METRICS_PORT": "-1",
    }
    if kubelet is not None:
        env.update(
            CDI_ROOT=str(kubelet.cdi_dir),
            KUBELET_PLUGINS_DIRECTORY_PATH=str(kubelet.plugins),
            KUBELET_REGISTRAR_DIRECTORY_PATH=str(kubelet.plugins_registry),
        )
    return env


def start(
    binary: Path, cluster_dir: Path, kubeconfig: Path, nodes: Iterable[str], devices: int, kubelet: Mapping[str, Kubelet] | None = None
) -> dict[str, int]:
    """Start one plugin per node, each in its own process group, logging to dra/<node>/plugin.log; return pids.

    Every socket path is checked first: the plugin would fail only once it binds, with a less helpful error.
    """
    kubelet = kubelet or {}
    envs = {node: plugin_env(cluster_dir, kubeconfig, node, devices, kubelet.get(node)) for node in nodes}
    for env in envs.values():
        for sock in (
            Path(env["KUBELET_REGISTRAR_DIRECTORY_PATH"]) / f"{DRIVER}-reg.sock",
            Path(env["KUBELET_PLUGINS_DIRECTORY_PATH"]) / DRIVER / "dra.sock",
        ):
            if len(os.fsencode(sock)) > _MAX_SOCKET_PATH:
                raise ValueError(
                    f"socket path too long for a unix socket ({len(os.fsencode(sock))} bytes): {sock}; shorten PHALANX_CACHE or the cluster name"
                )
    pids = {}
    for node, env in envs.items():
        Path(env["KUBELET_REGISTRAR_DIRECTORY_PATH"]).mkdir(parents=True, exist_ok=True)
        pids[node] = processes.start([str(binary)], kubeconfig, node_dir(cluster_dir, node) / "plugin.log", env)
    return pids


def running(kubeconfig: Path) -> dict[str, int]:
    """Live plugin processes of the cluster with this kubeconfig, by node name."""
    return {env.get("NODE_NAME", ""): pid for pid, env in processes.find(BINARY, kubeconfig).items()}


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def stop(kubeconfig: Path, timeout: float = 10) -> None:
    """SIGTERM every plugin of the cluster (SIGKILL after `timeout`), and wait until none is left.

    The published slices stay: the caller deletes them while the API server is up.
    """
    processes.stop(BINARY, kubeconfig, timeout)
