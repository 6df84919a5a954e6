"""Gang preemption that reclaims DRA devices (upstream 1.37 answers "No preemption victims found"), on the local control plane.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx_dev.localcluster import demo


@pytest.fixture
def priorities(cluster: Cluster, namespace: str) -> Iterator[dict[str, str]]:
    names = {"low": f"low-{namespace}", "urgent": f"urgent-{namespace}", "polite": f"polite-{namespace}"}
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names["low"]}, "value": 100},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names["urgent"]}, "value": 10000},
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": names["polite"]},
            "value": 10000,
            "preemptionPolicy": "Never",
        },
    ]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": classes}))
    yield names
    cluster.kubectl("delete", "priorityclass", *names.values(), "--ignore-not-found")


def _pod(name: str, priority_class: str | None = None) -> dict[str, Any]:
    spec = one_gpu_pod_spec()
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _apply(cluster: Cluster, namespace: str, *objects: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _running(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    pods = cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]
    return [
        p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]


def _devices_of(cluster: Cluster, namespace: str, pods: list[dict]) -> set[tuple[str, str, str]]:
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    out = set()
    for pod in pods:
        for status in pod["status"].get("resourceClaimStatuses") or []:
            for r in (
                ((claims.get(status["resourceClaimName"]) or {}).get("status") or {})
                .get("allocation", {})
                .get("devices", {})
                .get("results", [])
            ):
                out.add((r["driver"], r["pool"], r["device"]))
    return out


def _taken_down(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("phase") == "Failed"


def _preempted(cluster: Cluster, namespace: str, low: dict[str, Any], urgent: dict[str, Any]) -> int:
    """Run `low` (4 ranks), then `urgent`; once urgent runs, how many of low's first members were taken down."""
    name, preemptor = low["metadata"]["name"], urgent["metadata"]["name"]
    _apply(cluster, namespace, low)
    first = wait_for(lambda: (r := _running(cluster, namespace, name)) and len(r) == 4 and r, f"{name} running")
    _apply(cluster, namespace, urgent)
    wait_for(lambda: len(_running(cluster, namespace, preemptor)) == 4, f"{preemptor} running", timeout=120)
    still = {p["metadata"]["uid"]: p for p in cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={name}")["items"]}
    return sum(1 for p in first if (q := still.get(p["metadata"]["uid"])) is None or _taken_down(q))


def _condition(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    conds = (items[0].get("status") or {}).get("conditions") or [] if items else []
    return next((c for c in conds if c["type"] == keys.INITIALLY_SCHEDULED), {})


def test_a_gang_preempts_a_lower_priority_gang_for_its_dra_devices(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str]
) -> None:
    """The article's gap: train-a (priority 100, all) holds 4 GPUs, 2 more are held by pods of the urgent priority
    (never victims), a priority-0 GPU pod waits; train-urgent (priority 10000) gets exactly train-a's devices."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _apply(cluster, namespace, gpu_gang("train-a", 4, mode="all", priority_class=priorities["low"]))
    first = wait_for(lambda: (r := _running(cluster, namespace, "train-a")) and len(r) == 4 and r, "train-a running")
    held_by_a = _devices_of(cluster, namespace, first)
    _apply(cluster, namespace, _pod("filler-0", priorities["urgent"]), _pod("filler-1", priorities["urgent"]))
    wait_for(lambda: all(cluster.get("pod", f"filler-{i}", "-n", namespace)["spec"].get("nodeName") for i in (0, 1)), "fillers bound")
    _apply(cluster, namespace, _pod("sneaky"))
    _apply(cluster, namespace, gpu_gang("train-urgent", 4, mode="all", priority_class=priorities["urgent"]))

    urgent = wait_for(
        lambda: (r := _running(cluster, namespace, "train-urgent")) and len(r) == 4 and r, "train-urgent running", timeout=120
    )
    assert _devices_of(cluster, namespace, urgent) == held_by_a, "train-urgent runs on exactly the devices train-a held"
    still = {p["metadata"]["uid"]: p for p in cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=train-a")["items"]}
    standing = [p["metadata"]["name"] for p in first if (q := still.get(p["metadata"]["uid"])) and not _taken_down(q)]
    assert not standing, f"all 4 of train-a's pods were evicted as a unit; still standing: {standing}"
    sneaky = cluster.get("pod", "sneaky", "-n", namespace)
    assert not sneaky["spec"].get("nodeName"), "no other pod took the freed devices"
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=PreemptedByGang")["items"]
    assert len({e["involvedObject"]["name"] for e in events}) == 4 and "train-urgent" in events[0]["message"]
    rules = cluster.get("devicetaintrules", "-l", f"{keys.TAINT_PURPOSE_LABEL}=nominated")["items"]
    assert not rules, "the freed devices are given back once reserved"


def test_single_mode_gives_up_only_the_members_needed(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str]
) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    low = gpu_gang("train-a", 4, mode="single", priority_class=priorities["low"])
    taken = _preempted(cluster, namespace, low, gpu_gang("train-urgent", 4, mode="all", priority_class=priorities["urgent"]))
    assert taken == 2, f"exactly the 2 members needed were preempted, 2 kept running: {taken} preempted"


def test_no_victims_means_nothing_is_evicted_and_the_group_says_why(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str]
) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _apply(cluster, namespace, gpu_gang("train-a", 4, mode="all", priority_class=priorities["low"]))
    first = wait_for(lambda: (r := _running(cluster, namespace, "train-a")) and len(r) == 4 and r, "train-a running")
    _apply(cluster, namespace, gpu_gang("train-polite", 4, mode="all", priority_class=priorities["polite"]))
    cond = wait_for(
        lambda: (c := _condition(cluster, namespace, "train-polite")).get("reason") == "Unschedulable" and c, "train-polite Unschedulable"
    )
    assert "preemption: preemptionPolicy is Never" in cond["message"], cond
    assert {p["metadata"]["uid"] for p in _running(cluster, namespace, "train-a")} == {p["metadata"]["uid"] for p in first}


LINK_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "link.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'link.example.com'"}}]},
}
FABRIC = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "fabric-links"},
    "spec": {
        "driver": "link.example.com",
        "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
        "allNodes": True,
        "devices": [{"name": f"link-{i}", "attributes": {"index": {"int": i}}} for i in range(6)],
    },
}


def _link_template(namespace: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-link", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "link", "exactly": {"deviceClassName": "link.example.com", "count": 1}}]}}},
    }


def _link_gang(name: str, mode: str, priority_class: str) -> dict[str, Any]:
    job = gpu_gang(name, 4, mode=mode, priority_class=priority_class)
    spec = job["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "link", "resourceClaimTemplateName": "one-link"}]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "50m"}, "claims": [{"name": "link"}]}
    return job


@pytest.fixture
def fabric(cluster: Cluster) -> Iterator[None]:
    """Six network-attached links in one `allNodes` pool, published by hand (neither driver publishes such a pool)."""
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [LINK_CLASS, FABRIC]}))
    yield
    cluster.kubectl("delete", "resourceslice", "fabric-links", "--ignore-not-found")
    cluster.kubectl("delete", "deviceclass", "link.example.com", "--ignore-not-found")


@pytest.mark.parametrize(("mode", "evicted"), [("all", 4), ("single", 2)])
def test_preemption_reclaims_network_attached_devices(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str], fabric: None, mode: str, evicted: int
) -> None:
    """Slices: a hand-made `allNodes` pool of 6 links. train-a holds 4, 2 are free, train-urgent needs 4."""
    _apply(cluster, namespace, _link_template(namespace))
    taken = _preempted(
        cluster, namespace, _link_gang("train-a", mode, priorities["low"]), _link_gang("train-urgent", "all", priorities["urgent"])
    )
    assert taken == evicted, f"{mode}: {taken} of train-a's members preempted, expected {evicted}"


@pytest.fixture
def accelerators(cluster: Cluster) -> Iterator[None]:
    """A node-local extended resource, `example.com/accel: 2` on each worker, as the article's second case."""
    workers = [n["metadata"]["name"] for n in cluster.get("nodes")["items"] if n["metadata"]["name"].startswith("worker-")]
    for node in workers:
        patch = {"status": {"capacity": {"example.com/accel": "2"}, "allocatable": {"example.com/accel": "2"}}}
        cluster.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch))
    yield
    for node in workers:
        patch = {"status": {"capacity": {"example.com/accel": None}, "allocatable": {"example.com/accel": None}}}
        cluster.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def _accel_gang(name: str, mode: str, priority_class: str) -> dict[str, Any]:
    job = gpu_gang(name, 4, mode=mode, priority_class=priority_class)
    spec = job["spec"]["template"]["spec"]
    spec.pop("resourceClaims")
    one = {"cpu": "50m", "example.com/accel": "1"}
    spec["containers"][0]["resources"] = {"requests": one, "limits": {"example.com/accel": "1"}}
    return job


@pytest.mark.parametrize(("mode", "evicted"), [("all", 4), ("single", 2)])
def test_preemption_reclaims_a_node_local_extended_resource(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str], accelerators: None, mode: str, evicted: int
) -> None:
    taken = _preempted(
        cluster, namespace, _accel_gang("train-a", mode, priorities["low"]), _accel_gang("train-urgent", "all", priorities["urgent"])
    )
    assert taken == evicted, f"{mode}: {taken} of train-a's members preempted, expected {evicted}"
