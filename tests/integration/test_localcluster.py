"""The local control plane is a real Kubernetes v1.37 with the article's fake GPU nodes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import Cluster

from phalanx.localcluster.cluster import KUBE_VERSION


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
    assert sorted(s["spec"]["nodeName"] for s in slices) == ["worker-1", "worker-2", "worker-3"]
    assert all(len(s["spec"]["devices"]) == 2 for s in slices)
    device_class = cluster.get("deviceclass", "gpu.example.com")
    assert device_class["spec"]["selectors"][0]["cel"]["expression"] == "device.driver == 'gpu.example.com'"


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
