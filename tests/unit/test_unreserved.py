"""Which bound pods a still-allocated claim lost from reservedFor are reserved again (scheduling/unreserved.py)."""

from __future__ import annotations

import copy

from apiobjects import JSON, claim, lookup, pod
from phalanx.scheduling.unreserved import Unreserved

POD = pod("a-0", node="worker-1")


def reserved(obj: JSON, *pods: JSON, owner: JSON | None = None, node: str | None = None) -> JSON:
    """`obj` reserved for `pods`, owned by `owner` (a pod), its allocation on `node`."""
    out = copy.deepcopy(obj)
    out["status"]["reservedFor"] = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods]
    if owner is not None:
        out["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        ]
    if node is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        out["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [term]}
    return out


def stripped(obj: JSON) -> JSON:
    """What kube-scheduler's Unreserve leaves: the allocation, without the pod."""
    out = copy.deepcopy(obj)
    out["status"]["reservedFor"] = []
    return out


BEFORE = reserved(claim("a-0-gpu", "gpu-0"), POD, owner=POD, node="worker-1")
AFTER = stripped(BEFORE)


def due(noted: Unreserved, *pods: JSON, claims: tuple[JSON, ...] = (AFTER,), ours: bool = True) -> list[tuple[str, str]]:
    found = noted.due(lookup(*claims), lookup(*pods), lambda _: ours)
    return [(t.claim["metadata"]["name"], t.pod["metadata"]["name"]) for t in found]


def test_a_bound_pod_stripped_from_its_allocated_claim_is_due_again() -> None:
    noted = Unreserved()
    noted.note(BEFORE, AFTER)
    assert due(noted, POD) == [("a-0-gpu", "a-0")]


def test_a_pod_not_yet_bound_is_left_to_kube_scheduler_and_kept_until_it_binds() -> None:
    noted = Unreserved()
    noted.note(BEFORE, AFTER)
    waiting = pod("a-0")
    assert due(noted, waiting) == []
    assert noted.lost, "kept: the bind may land without kube-scheduler reserving it again"
    assert due(noted, POD) == [("a-0-gpu", "a-0")]


def test_listed_again_deallocated_or_gone_is_forgotten() -> None:
    noted = Unreserved()
    noted.note(BEFORE, AFTER)
    noted.note(AFTER, BEFORE)
    assert not noted.lost, "kube-scheduler reserved it again itself"
    noted.note(BEFORE, AFTER)
    noted.note(AFTER, claim("a-0-gpu"))
    assert not noted.lost, "deallocated"
    noted.note(BEFORE, AFTER)
    noted.gone(AFTER)
    assert not noted.lost


def test_a_pod_removed_together_with_the_allocation_or_from_a_new_allocation_is_not_noted() -> None:
    noted = Unreserved()
    noted.note(BEFORE, claim("a-0-gpu"))
    reallocated = stripped(reserved(claim("a-0-gpu", "gpu-1"), owner=POD))
    noted.note(BEFORE, reallocated)
    assert not noted.lost


def test_nothing_is_restored_for_a_pod_that_stopped_was_replaced_or_no_longer_uses_the_claim() -> None:
    for user in (
        pod("a-0", node="worker-1", phase="Succeeded"),
        {**POD, "metadata": {**POD["metadata"], "uid": "another"}},
        pod("a-0", node="worker-1", claims=("other",)),
    ):
        noted = Unreserved()
        noted.note(BEFORE, AFTER)
        assert due(noted, user) == []
        assert not noted.lost, user
    noted = Unreserved()
    noted.note(BEFORE, AFTER)
    assert due(noted) == [] and not noted.lost, "the pod is gone"


def test_a_pod_bound_off_the_allocations_node_or_a_claim_not_ours_is_left_alone() -> None:
    noted = Unreserved()
    noted.note(BEFORE, AFTER)
    assert due(noted, pod("a-0", node="worker-2")) == []
    noted.note(BEFORE, AFTER)
    assert due(noted, POD, ours=False) == [] and not noted.lost, "kube-scheduler allocated it: not Phalanx's reservation"


def test_the_first_scan_finds_an_allocated_claim_that_does_not_list_its_owner() -> None:
    noted = Unreserved()
    bystander = reserved(claim("b-0-gpu", "gpu-1"), pod("b-0", node="worker-1"), owner=pod("b-0"))
    noted.scan([AFTER, bystander, claim("free")])
    assert set(noted.lost) == {("ml", "a-0-gpu")}
    assert due(noted, POD) == [("a-0-gpu", "a-0")]


def test_one_member_of_a_shared_claim_stripped_is_noted_alone() -> None:
    first, second = pod("m-0", node="worker-1", claims=("shared",)), pod("m-1", node="worker-1", claims=("shared",))
    both = reserved(claim("shared", "gpu-0"), first, second, node="worker-1")
    one = reserved(claim("shared", "gpu-0"), second, node="worker-1")
    noted = Unreserved()
    noted.note(both, one)
    assert due(noted, first, second, claims=(one,)) == [("shared", "m-0")]
