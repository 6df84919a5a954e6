"""Which pods kube-scheduler may be allocating for: the release waits out their writes only when one exists."""

from __future__ import annotations

from typing import Any

from phalanx.kube.informers import Informer
from phalanx.scheduling.inflight import allocating, binding, unplaced

EXTENDED = {"example.com/gpu": "gpu.example.com"}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {"phase": "Pending"})
    return {"metadata": {"name": name, "namespace": "ns", **spec.pop("metadata", {})}, "spec": spec, "status": status}


def with_claim(name: str, claim: str | None, **spec: Any) -> dict[str, Any]:
    p = pod(name, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}], **spec)
    if claim is not None:
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return p


CLAIMS = {
    ("ns", "free"): {"metadata": {"name": "free"}, "status": {}},
    ("ns", "taken"): {
        "metadata": {"name": "taken"},
        "status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": "g0", "request": "r"}]}}},
    },
}


def claim(namespace: str, name: str) -> dict[str, Any] | None:
    return CLAIMS.get((namespace, name))


def test_a_pending_pod_with_an_unallocated_claim_may_be_mid_allocation() -> None:
    assert allocating([with_claim("a", "free")], claim, EXTENDED) == ["ns/a"]


def test_a_claim_not_yet_created_counts_and_an_allocated_one_does_not() -> None:
    assert allocating([with_claim("a", None), with_claim("b", "taken")], claim, EXTENDED) == ["ns/a"]


def test_gated_bound_deleting_and_finished_pods_are_not_scheduled() -> None:
    pods = [
        with_claim("gated", "free", schedulingGates=[{"name": "scheduling.phalanx.dev/gang"}]),
        with_claim("bound", "free", nodeName="worker-1"),
        with_claim("deleting", "free", metadata={"deletionTimestamp": "2026-11-29T00:00:00Z"}),
        with_claim("done", "free", status={"phase": "Failed"}),
    ]
    assert allocating(pods, claim, EXTENDED) == []


def test_an_extended_resource_served_by_a_device_class_counts_and_plain_cpu_does_not() -> None:
    gpu = pod("x", containers=[{"name": "c", "resources": {"limits": {"example.com/gpu": "1"}}}])
    cpu = pod("y", containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    assert allocating([gpu, cpu], claim, EXTENDED) == ["ns/x"]


def test_a_pod_nominated_to_a_node_with_its_claim_unwritten_is_being_bound() -> None:
    nominated = with_claim("a", "free", status={"phase": "Pending", "nominatedNodeName": "worker-1"})
    queued = with_claim("b", "free")
    written = with_claim("c", "taken", status={"phase": "Pending", "nominatedNodeName": "worker-1"})
    bound = with_claim("d", "free", nodeName="worker-1", status={"phase": "Pending", "nominatedNodeName": "worker-1"})
    assert binding([nominated, queued, written, bound], claim, EXTENDED) == ["ns/a"]


def test_the_index_holds_exactly_the_pods_kube_scheduler_may_still_place_as_they_change() -> None:
    """`unplaced` is kept by the pods' watch: a pod joins it when its gate is lifted and leaves it when bound, deleted
    or finished, and `allocating` over it names what it names over every pod."""
    pods = Informer("pods", None, "/api/v1/pods", None, lambda: None, keep=lambda obj: obj)  # type: ignore[arg-type]
    gate = [{"name": "scheduling.phalanx.dev/gang"}]
    for i, p in enumerate([with_claim("a", "free", schedulingGates=gate), with_claim("b", "taken"), pod("c", nodeName="w")]):
        pods.apply("ADDED", {**p, "metadata": {**p["metadata"], "resourceVersion": str(i)}})
    assert names(unplaced(pods)) == ["b"]
    lifted = with_claim("a", "free")
    pods.apply("MODIFIED", lifted)
    assert names(unplaced(pods)) == ["a", "b"]
    assert allocating(unplaced(pods), claim, EXTENDED) == allocating(pods.items(), claim, EXTENDED) == ["ns/a"]
    pods.apply("MODIFIED", with_claim("a", "free", nodeName="w"))
    pods.apply("MODIFIED", with_claim("b", "taken", status={"phase": "Failed"}))
    assert unplaced(pods) == []
    pods.apply("MODIFIED", lifted)
    pods.apply("DELETED", lifted)
    assert unplaced(pods) == []


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)
