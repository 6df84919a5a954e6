"""The local cluster's pure parts: images made here (OCI archives for containerd to import), the real nodes'
addresses, a port lost to another cluster. No cluster needed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, images, nodenet
from phalanx_dev.localcluster.cluster import PortTaken

ROOT = Path(__file__).parents[2]


def _tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hello").write_text("#!/bin/sh\necho hello\n")
    (root / "bin" / "hello").chmod(0o755)
    (root / "bin" / "hi").symlink_to("hello")
    return root


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    member = tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
    assert member is not None
    return member.read()


def test_an_archive_is_a_valid_oci_layout_whose_digests_match_its_blobs(tmp_path: Path) -> None:
    config = images.ImageConfig(entrypoint=("/bin/hello",), user="65532:65532", workdir="/app")
    digest = images.oci_archive(_tree(tmp_path / "rootfs"), tmp_path / "img.tar", name="phalanx.local/hello:1", config=config)
    with tarfile.open(tmp_path / "img.tar") as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        entry = index["manifests"][0]
        assert entry["digest"] == digest and entry["platform"] == {"architecture": "amd64", "os": "linux"}
        assert entry["annotations"]["io.containerd.image.name"] == "phalanx.local/hello:1"
        manifest_blob = _blob(tar, digest)
        assert "sha256:" + hashlib.sha256(manifest_blob).hexdigest() == digest
        manifest = json.loads(manifest_blob)
        image_config = json.loads(_blob(tar, manifest["config"]["digest"]))
        layer = _blob(tar, manifest["layers"][0]["digest"])
    assert image_config["config"]["Entrypoint"] == ["/bin/hello"] and image_config["config"]["User"] == "65532:65532"
    assert len(layer) == manifest["layers"][0]["size"]
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as rootfs:
        names = {m.name: m for m in rootfs.getmembers()}
    assert names["bin/hello"].mode & 0o111 and names["bin/hi"].issym() and names["bin/hi"].linkname == "hello"
    assert images.archive_name(tmp_path / "img.tar") == "phalanx.local/hello:1"


def test_the_same_tree_gives_the_same_image(tmp_path: Path) -> None:
    """mtimes are zeroed and the layer compressed without a timestamp, so a rebuild is the same image."""
    config = images.ImageConfig(cmd=("sh",))
    first = images.oci_archive(_tree(tmp_path / "a"), tmp_path / "a.tar", name="x:1", config=config)
    second = images.oci_archive(_tree(tmp_path / "b"), tmp_path / "b.tar", name="x:1", config=config)
    assert first == second


def test_the_hand_built_operator_image_runs_as_the_dockerfile_says() -> None:
    config = images.dockerfile_config(ROOT / "Dockerfile")
    assert config.entrypoint == ("phalanx",)
    assert config.user == "65532:65532"
    assert config.workdir == "/app"


def test_each_node_slot_has_its_own_addresses() -> None:
    """Slot n: 10.213.n.1 on the host end, 10.213.n.2 the node (its InternalIP), pods 10.244.n.0/24; no two overlap."""
    nets = [nodenet.NodeNet(f"phx-t-{n}", n) for n in (0, 1, 7, 255)]
    assert (nets[2].host_ip, nets[2].node_ip, nets[2].pod_cidr, nets[2].pod_gateway) == (
        "10.213.7.1",
        "10.213.7.2",
        "10.244.7.0/24",
        "10.244.7.1",
    )
    addresses = [a for n in nets for a in (n.host_ip, n.node_ip, n.pod_cidr)]
    assert len(set(addresses)) == len(addresses)
    assert all(len(n.host_link) <= 15 for n in nets), "Linux interface names have 15 bytes"


def test_a_component_that_lost_its_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kwokctl picks free ports, the components bind them a moment later: a cluster created at the same moment can
    take one. `up` creates the cluster again when a log says so, instead of waiting 120 s for nodes that never come."""
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    local = LocalCluster(ClusterSpec(name="clash"))
    logs = local.cluster_dir / "logs"
    logs.mkdir(parents=True)
    (logs / "kube-scheduler.log").write_text("I1201 started\n")
    local.check_ports()
    (logs / "kwok-controller.log").write_text(
        '{"msg":"Failed to run server","err":"listen tcp 127.0.0.1:32757: bind: address already in use"}\n'
    )
    with pytest.raises(PortTaken, match="kwok-controller of cluster 'clash' found its port taken"):
        local.check_ports()


def test_the_controller_managers_client_limits_and_node_grace_are_set_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    stock = LocalCluster(ClusterSpec(name="stock"))._kwokctl_config()
    raised = LocalCluster(ClusterSpec(name="raised", controller_qps=100))._kwokctl_config()

    def args(path: Path) -> dict[str, str]:
        patches = yaml.safe_load(path.read_text())["componentsPatches"]
        manager = next(p for p in patches if p["name"] == "kube-controller-manager")
        return {a["key"]: a["value"] for a in manager["extraArgs"]}

    assert "kube-api-qps" not in args(stock)
    assert args(raised) == {**args(stock), "kube-api-qps": "100", "kube-api-burst": "150"}
    patient = LocalCluster(ClusterSpec(name="patient", node_monitor_grace="1h"))._kwokctl_config()
    assert args(patient) == {**args(stock), "node-monitor-grace-period": "1h"}


def test_kwok_s_lease_parallelism_is_set_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    stock = list(yaml.safe_load_all(LocalCluster(ClusterSpec(name="stock"))._kwokctl_config().read_text()))
    leases = list(yaml.safe_load_all(LocalCluster(ClusterSpec(name="leases", node_lease_parallelism=16))._kwokctl_config().read_text()))
    assert [d["kind"] for d in stock] == ["KwokctlConfiguration"]
    assert leases[0] == stock[0], "the kwokctl document as it was"
    assert [(d["kind"], d["options"]["nodeLeaseParallelism"]) for d in leases[1:]] == [("KwokConfiguration", 16)]
    assert leases[1]["options"]["podPlayStageParallelism"] > 0 < leases[1]["options"]["nodePlayStageParallelism"], (
        "kwok takes a configuration given whole: without them it refuses to start"
    )


def test_a_started_process_is_judged_by_its_pid_running_or_how_it_ended(tmp_path: Path) -> None:
    import os
    import signal
    import time

    from phalanx_dev.localcluster import processes

    running = processes.start(["sleep", "30"], tmp_path / "kubeconfig", tmp_path / "sleep.log")
    done = processes.start(["true"], tmp_path / "kubeconfig", tmp_path / "true.log")
    try:
        assert processes.exit_status(running) is None
        deadline = time.monotonic() + 10
        while (status := processes.exit_status(done)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == "exit code 0"
        os.kill(running, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (status := processes.exit_status(running)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == "killed by signal 9"
        assert processes.exit_status(1) == "ended (not a child of this process)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(running, signal.SIGKILL)


def test_stopping_waits_to_reap_a_process_that_has_left_the_process_list_but_not_yet_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process drops its cmdline (so `find` stops seeing it) a moment before it can be reaped; under load that
    moment grows, and a stop that reaped once and returned left a zombie (CI's test_localcluster zombie check). Here
    `find` stops seeing it at once while it takes half a second to exit."""
    import time

    from phalanx_dev.localcluster import processes

    pid = processes.start(["sh", "-c", 'trap "sleep 0.5; exit 0" TERM; sleep 30 & wait'], tmp_path / "kubeconfig", tmp_path / "slow.log")
    time.sleep(0.3)  # the trap is set
    seen = iter([{pid: {}}])
    monkeypatch.setattr(processes, "find", lambda binary, kubeconfig: next(seen, {}))
    processes.stop("sh", tmp_path / "kubeconfig")
    time.sleep(1.0)  # long past its exit
    stat = Path(f"/proc/{pid}/stat")
    state = stat.read_text().rsplit(")", 1)[1].split()[0] if stat.exists() else None
    assert state is None, f"the stopped process is left in state {state} (Z: a zombie nobody reaped)"
