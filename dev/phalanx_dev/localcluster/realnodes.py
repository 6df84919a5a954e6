"""Real nodes beside the kwok ones: kubelet v1.37 with containerd 2 and runc, each in a network namespace of its own.

A real node runs containers: pods stop in their grace period because a
process has to end, dra-example-driver's plugin is called by a kubelet
(NodePrepareResources writes the CDI spec, containerd injects it), and the
operator itself can run as the pods `manifests/` describes.

A node's configuration, logs and containerd's store live under
`<cluster>/nodes/<name>/`; its sockets (containerd's under /run/phalanx, the
kubelet's root with the plugin sockets under /var/lib/phalanx) under short
directories named by a hash, as a unix socket path has 107 bytes. Processes
are found again through /proc by those paths in their command line or
environment, so `down` works from any later process. What this machine refused, and what each setting
below is for, is said where it is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from phalanx_dev.localcluster import images, nodenet

RUNC = Path("/usr/sbin/runc")
CNI_BIN = Path("/usr/lib/cni")
# Debian's packages a real node needs (containerd and kubelet are built from the Go module proxy instead).
DEBIAN_PACKAGES = {
    RUNC: "runc",
    CNI_BIN / "bridge": "containernetworking-plugins",
    Path("/usr/sbin/iptables"): "iptables",
    images.BUSYBOX: "busybox-static",
    Path("/usr/sbin/debootstrap"): "debootstrap",
    Path("/usr/bin/nsenter"): "util-linux",
    Path("/usr/sbin/ip"): "iproute2",
}
REAL_NODE_LABEL = "phalanx.dev/real-node"
RUN_ROOT = Path("/run/phalanx")
STATE_ROOT = Path("/var/lib/phalanx")
# The workloads name the public busybox; the local one answers to that name too, as `kind load` would make it.
IMAGE_ALIASES = {images.BUSYBOX_IMAGE: ("docker.io/library/busybox:1.36",)}


@dataclass(frozen=True)
class RealNode:
    name: str
    directory: Path
    run: Path
    netns: str
    slot: int

    @property
    def net(self) -> nodenet.NodeNet:
        return nodenet.NodeNet(self.netns, self.slot)

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """Short, like `run`: the plugin sockets the kubelet finds live under it."""
        return STATE_ROOT / self.run.name / "kubelet"

    @property
    def plugins_registry(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.kubelet_root / "plugins"

    @property
    def cdi_dir(self) -> Path:
        return self.directory / "cdi"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "pod-logs"


def names(count: int) -> list[str]:
    return [f"real-{i}" for i in range(1, count + 1)]


def missing_packages() -> list[str]:
    return sorted({pkg for path, pkg in DEBIAN_PACKAGES.items() if not path.exists()})


def install_packages() -> None:
    """Install what a real node needs from Debian's packages when missing (root only, as the kubelet needs)."""
    if os.geteuid() != 0:
        raise PermissionError("real nodes need root: kubelet, containerd and network namespaces")
    if missing := missing_packages():
        _log(f"installing Debian packages {', '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", *missing]
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)  # a fresh machine's lists
            subprocess.run(install, env=env, check=True, stdout=subprocess.DEVNULL)


def start(
    cluster: str, cluster_dir: Path, kubeconfig: Path, api_port: int, count: int, *, bins: Path, node_bins: Path, images_dir: Path
) -> list[RealNode]:
    """Start `count` real nodes; they register themselves, and are Ready once the kubelet and CNI are up."""
    install_packages()
    archives = base_images(images_dir)
    nodes = []
    taken: set[int] = set()
    for index, name in enumerate(names(count)):
        netns = nodenet.netns_name(cluster, index)
        run = RUN_ROOT / hashlib.sha256(f"{cluster_dir}/{name}".encode()).hexdigest()[:12]
        directory = cluster_dir / "nodes" / name
        stop_node(directory, node_bins)
        net = nodenet.create(netns, api_port, taken=taken)
        taken.add(net.slot)
        node = RealNode(name, directory, run, netns, net.slot)
        for d in (directory, run, node.cdi_dir, node.pod_logs, node.plugins_registry):
            d.mkdir(parents=True, exist_ok=True)
        (directory / "node.json").write_text(json.dumps({k: str(v) for k, v in asdict(node).items()}))
        _spawn(
            node,
            "apiproxy",
            [sys.executable, "-m", "phalanx_dev.localcluster.nodenet", "--netns", netns, "--port", str(api_port)],
            netns=False,
        )
        _start_containerd(node, node_bins)
        for archive in archives:
            import_image(node, archive, node_bins)
        _start_kubelet(node, kubeconfig, bins)
        nodes.append(node)
    return nodes


def base_images(images_dir: Path) -> list[Path]:
    """The pause and busybox archives, made once per busybox binary and kept in `images_dir`."""
    stamp = hashlib.sha256(images.BUSYBOX.read_bytes() + images.PAUSE_SCRIPT.encode()).hexdigest()[:12]
    out = images_dir / stamp
    made = []
    for name, script, config in (
        (images.PAUSE_IMAGE, images.PAUSE_SCRIPT, images.ImageConfig(entrypoint=("/pause",))),
        (images.BUSYBOX_IMAGE, None, images.ImageConfig(cmd=("sh",))),
    ):
        archive = out / (name.split("/")[-1].replace(":", "-") + ".tar")
        if not archive.exists():
            out.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=out))
            images.oci_archive(images.busybox_rootfs(work / "rootfs", script=script), archive, name=name, config=config)
            shutil.rmtree(work)
        made.append(archive)
    return made


def import_image(node: RealNode, archive: Path, node_bins: Path) -> None:
    """Load an OCI archive into the node's containerd, where the CRI finds it (namespace k8s.io)."""
    cmd = [str(node_bins / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io", "images", "import", "--local", str(archive)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"importing {archive.name} into {node.name} failed: {proc.stderr.strip()}")
    name = images.archive_name(archive)
    for alias in IMAGE_ALIASES.get(name, ()):
        tag = [*cmd[:6], "tag", "--force", name, alias]
        subprocess.run(tag, capture_output=True, text=True, check=True)


def wait_gone(directory: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _processes(directory) and time.monotonic() < deadline:
        time.sleep(0.1)


def loaded(cluster_dir: Path) -> list[RealNode]:
    """The real nodes a cluster started, read back from their records."""
    return [_record(d) for d in sorted((cluster_dir / "nodes").glob("*")) if (d / "node.json").exists()]


def _record(directory: Path) -> RealNode:
    saved = json.loads((directory / "node.json").read_text())
    return RealNode(saved["name"], Path(saved["directory"]), Path(saved["run"]), saved["netns"], int(saved["slot"]))


def stop_all(cluster_dir: Path, node_bins: Path) -> None:
    for directory in sorted((cluster_dir / "nodes").glob("*")):
        stop_node(directory, node_bins)


def stop_node(directory: Path, node_bins: Path, timeout: float = 30) -> None:
    """Stop the kubelet, every container, containerd and the forwarder; unmount and delete the node's state and namespace.

    Containers are killed through containerd before it stops: a shim and its container outlive containerd.
    """
    if not (directory / "node.json").exists():
        shutil.rmtree(directory, ignore_errors=True)
        return
    node = _record(directory)
    _signal(node, "kubelet", signal.SIGTERM)
    _kill_containers(node, node_bins)
    for role in ("kubelet", "containerd", "apiproxy"):
        _signal(node, role, signal.SIGTERM)
    started = time.monotonic()
    while left := [*_processes(node.run), *_processes(directory)]:
        if time.monotonic() > started + timeout:
            raise TimeoutError(f"{node.name}: processes {left} still running {timeout}s after SIGTERM (SIGKILL from {timeout / 3:.0f}s)")
        if time.monotonic() > started + timeout / 3:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    _unmount_under(directory, node.run, node.kubelet_root)
    nodenet.delete(node.net)
    shutil.rmtree(node.run, ignore_errors=True)
    shutil.rmtree(node.kubelet_root.parent, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    left = [str(d) for d in (node.run, node.kubelet_root.parent, directory, nodenet.NETNS_DIR / node.netns) if d.exists()]
    if left:
        raise RuntimeError(f"{node.name} left {', '.join(left)} behind (a mount still busy?); see /proc/self/mounts")


def _start_containerd(node: RealNode, node_bins: Path) -> None:
    cni = node.directory / "cni"
    cni.mkdir(exist_ok=True)
    (cni / "10-phalanx.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "phalanx",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "cni0",
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": node.net.pod_cidr}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            # the node's own leases, not the host's /var/lib/cni shared by every node and cluster
                            "dataDir": str(node.directory / "cni-leases"),
                        },
                    },
                    {"type": "loopback"},
                ],
            }
        )
    )
    # the pause image is pinned so the kubelet's image GC never takes it; a negative oom_score_adj is refused on
    # this machine (runc fails every sandbox with "can't get final child's PID from pipe: EOF") unless restricted;
    # pod namespaces go under the state directory, not /run/netns beside the nodes' own.
    config = f"""version = 3
root = '{node.directory / "containerd"}'
state = '{node.run / "state"}'
[grpc]
  address = '{node.containerd_socket}'
[ttrpc]
  address = '{node.run / "ttrpc.sock"}'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{images.PAUSE_IMAGE}'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ['{node.cdi_dir}']
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '{RUNC}'
    Root = '{node.run / "runc"}'
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{CNI_BIN}']
    conf_dir = '{cni}'
[plugins.'io.containerd.internal.v1.opt']
  path = '{node.directory / "opt"}'
"""
    path = node.directory / "containerd.toml"
    path.write_text(config)
    containerd = _spawn(node, "containerd", [str(node_bins / "containerd"), "--config", str(path)], env_path=node_bins)
    deadline = time.monotonic() + 30
    while not node.containerd_socket.exists():
        _check_alive(node, "containerd", containerd)
        if time.monotonic() > deadline:
            raise TimeoutError(f"containerd of {node.name} did not open {node.containerd_socket}")
        time.sleep(0.1)


def _start_kubelet(node: RealNode, kubeconfig: Path, bins: Path) -> None:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # this machine mounts cgroup v1 controllers, which 1.37 refuses unless told
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "address": node.net.node_ip,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        # only the API server reaches this address (inside our namespace); it presents no client certificate here
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(node.pod_logs),
        "resolvConf": "",
        "registerWithTaints": [],
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        # the images were imported, never pulled: the kubelet must not collect them
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "shutdownGracePeriod": "0s",
        "nodeStatusReportFrequency": "10s",
        "serializeImagePulls": False,
    }
    path = node.directory / "kubelet.yaml"
    path.write_text(yaml.safe_dump(config))
    own_kubeconfig = node.directory / "kubeconfig.yaml"
    shutil.copy2(kubeconfig, own_kubeconfig)
    argv = [
        str(bins / "kubelet"),
        f"--config={path}",
        f"--kubeconfig={own_kubeconfig}",
        f"--root-dir={node.kubelet_root}",
        f"--cert-dir={node.directory / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.net.node_ip}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=1",
    ]
    _spawn(node, "kubelet", argv)


def _spawn(node: RealNode, role: str, argv: list[str], *, netns: bool = True, env_path: Path | None = None) -> subprocess.Popen[bytes]:
    """Start one of the node's processes in its own session (in the node's network namespace unless told), logging to <role>.log."""
    env = dict(os.environ)
    if env_path is not None:
        env["PATH"] = f"{env_path}{os.pathsep}{env.get('PATH', '')}"
    env["PHALANX_NODE_DIR"] = str(node.directory)
    env["PHALANX_NODE_ROLE"] = role
    cmd = [*node.net.nsenter(), *argv] if netns else argv
    with (node.directory / f"{role}.log").open("ab") as out:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _check_alive(node: RealNode, role: str, proc: subprocess.Popen[bytes]) -> None:
    """By the process this call started: /proc would show a child between fork and exec with its parent's environment."""
    if proc.poll() is not None:
        log = node.directory / f"{role}.log"
        raise RuntimeError(f"{role} of {node.name} exited; {log}:\n{log.read_text()[-3000:] if log.exists() else ''}")


def _by_role(directory: Path, role: str) -> list[int]:
    return [pid for pid, env in _environs() if env.get("PHALANX_NODE_DIR") == str(directory) and env.get("PHALANX_NODE_ROLE") == role]


def _processes(path: Path) -> list[int]:
    """Every live process whose command line or environment names this node's directory (its shims and containers' shims too)."""
    mark = str(path)
    found = []
    for pid, env in _environs():
        if env.get("PHALANX_NODE_DIR") == mark:
            found.append(pid)
            continue
        try:
            if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _environs() -> list[tuple[int, dict[str, str]]]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
            if b"PHALANX_NODE_" not in raw and b"phalanx" not in (entry / "cmdline").read_bytes():
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" in status:
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        out.append((int(entry.name), env))
    return out


def _signal(node: RealNode, role: str, sig: signal.Signals) -> None:
    for pid in _by_role(node.directory, role):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _kill_containers(node: RealNode, node_bins: Path) -> None:
    """SIGKILL every task of the node's containerd, while it still answers."""
    if not node.containerd_socket.exists():
        return
    ctr = [str(node_bins / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io"]
    listed = subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, timeout=20)
    for task in listed.stdout.split():
        subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", "--all", task], capture_output=True, timeout=20)


def _unmount_under(*roots: Path) -> None:
    """Lazily unmount whatever the kubelet (its root, bound onto itself; volumes) and containerd (rootfs, shm,
    netns) left mounted at or under the node's directories."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = [m for m in mounts if any(m == str(r) or m.startswith(f"{r}/") for r in roots)]
    for point in sorted(inside, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _log(message: str) -> None:
    print(f"localcluster: {message}", file=sys.stderr, flush=True)
