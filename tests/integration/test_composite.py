"""A gang of roles on the local control plane: a CompositePodGroup (upstream's KEP-6012 shape) with a launcher role
and a workers role, each a PodGroup with its own minCount, placed whole or not at all (README "A gang of roles").

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs); each pod asks for one.
"""

from __future__ import annotations

import json
from typing import Any

from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx_dev.localcluster import demo

GPUS = 6


def composite(name: str, min_groups: int) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "CompositePodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": min_groups}}, "disruptionMode": {"all": {}}},
    }


def role(name: str, parent: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "parentCompositePodGroupName": parent,
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "disruptionMode": {"all": {}},
        },
    }


def pod(name: str, group: str, node: str | None = None) -> dict[str, Any]:
    spec = one_gpu_pod_spec()
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {keys.POD_GROUP_LABEL: group}}, "spec": spec}


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _pods(cluster: Cluster, namespace: str, composite_name: str) -> list[dict]:
    return cluster.get("-n", namespace, "pods", "-l", f"{keys.COMPOSITE_LABEL}={composite_name}")["items"]


def _bound(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["spec"].get("nodeName")]


def _condition(cluster: Cluster, namespace: str, name: str, type_: str) -> dict:
    status = cluster.get("-n", namespace, "compositepodgroup", name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _free_gpus(cluster: Cluster) -> int:
    claims = cluster.get("resourceclaims", "-A")["items"]
    return GPUS - sum(len(((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []) for c in claims)


def _hold(cluster: Cluster, namespace: str, gpus: int, name: str = "holder") -> None:
    _apply(cluster, namespace, gpu_gang(name, gpus))

    def running() -> bool:
        pods = cluster.get("-n", namespace, "pods", "-l", f"batch.kubernetes.io/job-name={name}")["items"]
        return len([p for p in pods if p["status"].get("phase") == "Running"]) == gpus

    wait_for(running, f"{name} running on {gpus} GPUs")


def _unschedulable(cluster: Cluster, namespace: str, name: str) -> dict:
    return wait_for(
        lambda: (c := _condition(cluster, namespace, name, keys.INITIALLY_SCHEDULED)).get("reason") == "Unschedulable" and c,
        f"{name} found Unschedulable",
    )


def test_a_launcher_and_three_workers_wait_whole_where_each_role_alone_would_fit(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """3 GPUs free: the launcher alone (1) would fit, and so would the workers' minimum alone (3); together they need
    4, so neither goes (a launcher's minimum alone would let it and two workers go; the workers' alone, three workers
    without their launcher). Once the holder goes, all four run, placed by Phalanx, and the composite reads
    Scheduled; a worker evicted in mode all takes the launcher and the other workers down with it."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _hold(cluster, namespace, 3)
    assert _free_gpus(cluster) == 3
    _apply(
        cluster,
        namespace,
        composite("train", 2),
        role("train-launcher", "train", 1),
        role("train-workers", "train", 3),
        pod("launcher", "train-launcher"),
        *(pod(f"worker-{i}", "train-workers") for i in range(3)),
    )
    pods = wait_for(lambda: len(p := _pods(cluster, namespace, "train")) == 4 and p, "the 4 pods, labelled into the composite")
    assert all(keys.SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []] for p in pods), "gated at creation"
    short = _unschedulable(cluster, namespace, "train")
    assert "train-launcher" in short["message"] and "train-workers" in short["message"], short
    assert not _bound(_pods(cluster, namespace, "train")), "no part of the composite was placed"
    assert _free_gpus(cluster) == 3, "and it holds nothing"
    explained = cluster.explain("train", namespace)
    assert "train-launcher" in explained and "train-workers" in explained, explained

    cluster.kubectl("-n", namespace, "delete", "job", "holder", "--wait=false")
    running = wait_for(
        lambda: len(b := [p for p in _bound(_pods(cluster, namespace, "train")) if p["status"].get("phase") == "Running"]) == 4 and b,
        "the launcher and its 3 workers running",
        timeout=120,
    )
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in running), "Phalanx pinned each"
    wait_for(lambda: _condition(cluster, namespace, "train", keys.INITIALLY_SCHEDULED).get("status") == "True", "the composite Scheduled")
    wait_for(  # the counts on their own trail by up to status.COUNTS_EVERY, so they may trail the condition
        lambda: (cluster.get("-n", namespace, "compositepodgroup", "train").get("status") or {}).get("bound") == 4,
        "the composite's counts show all 4 bound",
    )

    worker = next(p for p in running if p["metadata"]["name"].startswith("worker"))
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": worker["metadata"]["name"], "namespace": namespace}}
    cluster.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{worker['metadata']['name']}/eviction", "-f", "-", stdin=json.dumps(body)
    )
    others = {p["metadata"]["uid"] for p in running if p is not worker}

    def down() -> bool:
        now = {p["metadata"]["uid"]: p for p in _pods(cluster, namespace, "train")}
        return all(u not in now or now[u]["metadata"].get("deletionTimestamp") or now[u]["status"].get("phase") == "Failed" for u in others)

    wait_for(down, "the launcher and the other workers taken down with the evicted worker", timeout=60)
    disrupted = wait_for(
        lambda: (c := _condition(cluster, namespace, "train", keys.DISRUPTION_TARGET)).get("status") == "True" and c, "DisruptionTarget"
    )
    assert "disruptionMode all" in disrupted["message"], disrupted


def test_the_launcher_role_keeps_four_workers_from_going_alone(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """4 GPUs free, on worker-1 and worker-2; the launcher must run on worker-3, whose GPUs a holder takes. minCount 4
    over the 5 pods would place four workers; the launcher's role (minimum 1) keeps all five waiting, and a child
    still missing (minGroupCount 3 of 2 made) is named."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    holder = gpu_gang("holder", 2)
    holder["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "worker-3"}
    _apply(cluster, namespace, holder)
    wait_for(lambda: _free_gpus(cluster) == 4, "the holder on worker-3's 2 GPUs")
    _apply(
        cluster,
        namespace,
        composite("train", 2),
        role("train-launcher", "train", 1),
        role("train-workers", "train", 3),
        pod("launcher", "train-launcher", node="worker-3"),
        *(pod(f"worker-{i}", "train-workers") for i in range(4)),
    )
    wait_for(lambda: len(_pods(cluster, namespace, "train")) == 5, "the 5 pods")
    short = _unschedulable(cluster, namespace, "train")
    assert "train-launcher 0 of minCount 1" in short["message"], short
    assert not _bound(_pods(cluster, namespace, "train")) and _free_gpus(cluster) == 4, "nothing placed, nothing held"

    _apply(cluster, namespace, composite("three", 3), role("three-a", "three", 1), pod("a-0", "three-a"))
    waiting = wait_for(
        lambda: "not created" in (c := _condition(cluster, namespace, "three", keys.INITIALLY_SCHEDULED)).get("message", "") and c,
        "three waiting for its missing children, named",
    )
    assert waiting["reason"] == keys.PENDING, waiting


def test_a_role_of_a_composite_that_does_not_exist_is_refused(cluster: Cluster, operator: Operator, namespace: str) -> None:
    _apply(cluster, namespace, role("orphan", "nowhere", 1))
    refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(pod("p", "orphan")), check=False)
    assert refused.returncode != 0 and "CompositePodGroup nowhere, which does not exist" in refused.stderr, refused.stderr
    nested = composite("inner", 1)
    nested["spec"]["parentCompositePodGroupName"] = "outer"
    refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(nested), check=False)
    assert refused.returncode != 0 and "one level of roles" in refused.stderr, refused.stderr


def test_a_single_composite_that_loses_its_launcher_runs_on_and_names_the_role(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode single: the launcher evicted, its 3 workers (at their minimum) run on, and the composite
    reads BelowMinCount naming the launcher's role though 3 of minCount 4 run; a count alone would say only that."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    single = composite("solo", 2)
    single["spec"]["disruptionMode"] = {"single": {}}
    _apply(
        cluster,
        namespace,
        single,
        role("solo-launcher", "solo", 1),
        role("solo-workers", "solo", 3),
        pod("launcher", "solo-launcher"),
        *(pod(f"worker-{i}", "solo-workers") for i in range(3)),
    )
    wait_for(
        lambda: _condition(cluster, namespace, "solo", keys.INITIALLY_SCHEDULED).get("status") == "True", "solo Scheduled", timeout=120
    )
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "launcher", "namespace": namespace}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/launcher/eviction", "-f", "-", stdin=json.dumps(body))
    below = wait_for(
        lambda: (c := _condition(cluster, namespace, "solo", keys.DISRUPTION_TARGET)).get("reason") == keys.BELOW_MIN_COUNT and c,
        "solo BelowMinCount",
    )
    assert "solo-launcher 0 of minCount 1" in below["message"], below
    workers = [p for p in _pods(cluster, namespace, "solo") if p["metadata"]["name"].startswith("worker")]
    assert len(workers) == 3 and all(not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") for p in workers), (
        "the workers run on"
    )
