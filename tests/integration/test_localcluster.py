"""The local control plane is a real Kubernetes v1.37 with the article's GPU nodes.

Slices: the session cluster's, from dra-example-driver's plugin, one process
per worker; the lifecycle test starts a cluster of its own with the plugin too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import Cluster, cluster_name

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, dradriver, fakegpu
from phalanx_dev.localcluster.cluster import KUBE_VERSION

WORKERS = ["worker-1", "worker-2", "worker-3"]


def _local(cluster: Cluster) -> Cluster:
    if cluster.local is None:
        pytest.skip("checks the local control plane itself; PHALANX_E2E_KUBECONFIG points elsewhere")
    return cluster


def test_apiserver_reports_the_built_version(cluster: Cluster) -> None:
    _local(cluster)
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == KUBE_VERSION
    assert version["clientVersion"]["gitVersion"] == KUBE_VERSION


def test_dra_v1_is_served_and_the_upstream_gang_api_is_not(cluster: Cluster) -> None:
    _local(cluster)
    resources = cluster.kubectl("api-resources", "-o", "name").stdout.split()
    assert "resourceclaims.resource.k8s.io" in resources
    assert "resourceslices.resource.k8s.io" in resources
    assert "podgroups.scheduling.k8s.io" not in resources, "no feature gate is set by default"


def test_nodes_have_the_articles_shape(cluster: Cluster) -> None:
    _local(cluster)
    nodes = {n["metadata"]["name"]: n for n in cluster.get("nodes")["items"]}
    assert sorted(nodes) == ["control-plane", "worker-1", "worker-2", "worker-3"]
    for node in nodes.values():
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
    taints = nodes["control-plane"]["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [("node-role.kubernetes.io/control-plane", "NoSchedule")]
    slices = cluster.get("resourceslices")["items"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == WORKERS
    assert all(len(s["spec"]["devices"]) == 2 for s in slices)
    device_class = cluster.get("deviceclass", "gpu.example.com")
    assert device_class["spec"] == dradriver.device_class()["spec"], "the chart's DeviceClass"


def test_each_workers_slice_is_published_by_its_own_driver_plugin(cluster: Cluster) -> None:
    local = _local(cluster).local
    assert local is not None
    assert sorted(local.driver_processes()) == WORKERS, "one live dra-example-kubeletplugin per worker"
    uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in cluster.get("nodes")["items"]}
    slices = {s["spec"]["nodeName"]: s for s in cluster.get("resourceslices")["items"]}
    assert sorted(slices) == WORKERS
    for node, published in slices.items():
        assert published["metadata"]["name"].startswith(f"00000-gpu.example.com-{node}-"), "named by the driver's slice controller"
        standin = fakegpu.resource_slice(node, uids[node], 2)
        assert published["metadata"]["ownerReferences"] == standin["metadata"]["ownerReferences"]
        # The stand-in differs only in the uuid values (the driver draws them from Go's math/rand, seeded by node name).
        assert _without_uuids(published["spec"]) == _without_uuids(standin["spec"])
        uuids = [d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]]
        assert all(re.fullmatch(r"gpu-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids), uuids


def _without_uuids(spec: dict) -> dict:
    devices = [{**d, "attributes": {k: v for k, v in d["attributes"].items() if k != "uuid"}} for d in spec["devices"]]
    return {**spec, "devices": devices}


@pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="starts a local control plane of its own")
def test_down_leaves_no_plugin_process_and_no_slice() -> None:
    """A cluster of its own, since it stops the driver. A plugin stopped alone leaves its slice behind, so
    teardown must delete the slices after stopping every plugin."""
    local = LocalCluster(ClusterSpec(name=cluster_name("drv"), workers=2, gpus_per_worker=1, driver="dra-example-driver"))
    try:
        local.up()
        plugins = local.driver_processes()
        assert sorted(plugins) == ["worker-1", "worker-2"]
        assert all(os.getpgid(pid) == pid for pid in plugins.values()), "each plugin leads its own process group"
        assert 10_000 < dradriver.rss_kib(plugins["worker-1"]) < 200_000

        os.kill(plugins["worker-1"], signal.SIGTERM)
        os.waitpid(plugins["worker-1"], 0)
        time.sleep(1)
        assert "worker-1" in _slice_nodes(local), "a slice outlives its plugin"

        local.stop_driver()
        assert local.driver_processes() == {}
        assert _slice_nodes(local) == []
    finally:
        local.down()
    assert not local.cluster_dir.exists()
    assert dradriver.running(local.kubeconfig) == {}
    left = [line for line in _ps() if str(local.cluster_dir) in line]
    assert left == [], left
    # its own plugins only: another child of this process (a kube-apiserver a fault test restarted, say) may be
    # between its exit and its reaping as this looks
    unreaped = set(plugins.values()) & set(_zombie_children())
    assert not unreaped, f"every plugin this process started was reaped: {sorted(unreaped)} left"


def _slice_nodes(local: LocalCluster) -> list[str]:
    out = local.kubectl("get", "resourceslices", "-o", "jsonpath={.items[*].spec.nodeName}").stdout
    return sorted(out.split())


def _ps() -> list[str]:
    return subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout.splitlines()


def _zombie_children() -> list[int]:
    zombies = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            zombies.append(int(stat.parent.name))
    return zombies


def test_pods_run_on_fake_nodes_and_deletion_completes(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("-n", namespace, "run", "probe", "--image=busybox:1.36", "--restart=Never", "--", "sleep", "3600")
    pod = _wait_for(lambda: _pod_if(cluster, namespace, "probe", lambda p: p["status"].get("phase") == "Running"))
    assert pod["spec"]["nodeName"].startswith("worker-"), "the control-plane taint is honoured"
    cluster.kubectl("-n", namespace, "delete", "pod", "probe", "--wait=true", "--timeout=60s")


def test_running_pod_exits_on_request(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("-n", namespace, "run", "worker", "--image=busybox:1.36", "--restart=Never", "--", "sleep", "3600")
    _wait_for(lambda: _pod_if(cluster, namespace, "worker", lambda p: p["status"].get("phase") == "Running"))
    cluster.kubectl("-n", namespace, "annotate", "pod", "worker", "localcluster.phalanx.dev/exit=1")
    pod = _wait_for(lambda: _pod_if(cluster, namespace, "worker", lambda p: p["status"].get("phase") == "Failed"))
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1


def test_service_account_kubeconfig_is_not_admin(cluster: Cluster) -> None:
    local = _local(cluster).local
    assert local is not None
    kubeconfig = local.service_account_kubeconfig("phalanx-system", "probe")
    whoami = local.kubectl("auth", "whoami", "-o", "json", "--kubeconfig", str(kubeconfig))
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == "system:serviceaccount:phalanx-system:probe"
    denied = local.kubectl("get", "nodes", "--kubeconfig", str(kubeconfig), check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr


def _pod_if(cluster: Cluster, namespace: str, name: str, predicate) -> dict | None:
    proc = cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    pod = json.loads(proc.stdout)
    return pod if predicate(pod) else None


def _wait_for(probe, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while (result := probe()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met in {timeout}s")
        time.sleep(0.5)
    return result


def test_install_manifests_are_accepted_by_the_api_server(cluster: Cluster) -> None:
    root = Path(__file__).parents[2]
    cluster.kubectl("apply", "-f", str(root / "manifests" / "namespace.yaml"))
    proc = cluster.kubectl("apply", "-k", str(root / "manifests"), "--dry-run=server", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "deployment.apps/phalanx" in proc.stdout and "clusterrole.rbac.authorization.k8s.io/phalanx" in proc.stdout
