"""phalanx_incomplete_group_devices: which gangs' devices count, from API-shaped objects."""

from __future__ import annotations

from typing import Any

from phalanx.api import keys
from phalanx.scheduling import quorum


def _group(min_count: int = 2, *, scheduled: bool = True, reservation: bool = True, policy: str = "gang") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": keys.INITIALLY_SCHEDULED, "status": "True" if scheduled else "False"}]}
    if reservation:
        status["reservation"] = {"state": "Released", "placements": [], "claims": []}
    spec_policy = {"gang": {"minCount": min_count}} if policy == "gang" else {"basic": {}}
    return {
        "metadata": {
            "name": "g",
            "namespace": "ns",
            "uid": "g-uid",
            "ownerReferences": [{"kind": "Job", "controller": True, "uid": "job"}],
        },
        "spec": {"schedulingPolicy": spec_policy, "disruptionMode": {"all": {}} if policy == "gang" else {"single": {}}},
        "status": status,
    }


def _pod(name: str, *, node: str | None = "n1", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "labels": {keys.JOB_UID_LABEL: "job"}},
        "spec": {"nodeName": node, "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]},
        "status": {"phase": phase},
    }


def _claims(*names: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("ns", f"{n}-gpu"): {"status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": f"{n}-dev"}]}}}}
        for n in names
    }


def test_a_gang_at_quorum_holds_nothing_below_it() -> None:
    claims = _claims("a", "b")
    assert quorum.held_devices(_group(), [_pod("a"), _pod("b")], lambda ns, n: claims.get((ns, n))) == 0


def test_a_gang_that_lost_a_member_counts_the_devices_the_others_hold() -> None:
    claims = _claims("a", "b")
    pods = [_pod("a"), _pod("b", phase="Failed")]
    assert quorum.held_devices(_group(), pods, lambda ns, n: claims.get((ns, n))) == 1
    assert quorum.incomplete_group_devices([_group()], {"g-uid": pods}, lambda ns, n: claims.get((ns, n))) == 1


def test_a_release_in_progress_is_left_out_and_a_basic_group_never_counts() -> None:
    claims = _claims("a")
    pods = [_pod("a", node=None)]
    assert quorum.held_devices(_group(scheduled=False), pods, lambda ns, n: claims.get((ns, n))) == 0
    assert quorum.held_devices(_group(scheduled=False, reservation=False), pods, lambda ns, n: claims.get((ns, n))) == 1
    assert quorum.held_devices(_group(policy="basic"), [_pod("a", phase="Failed")], lambda ns, n: claims.get((ns, n))) == 0


def test_the_group_s_claim_counts_once_however_many_members_use_it() -> None:
    """Each rank has a claim of its own and uses the group's claim of two devices: two ranks left of minCount 3 hold
    their two devices and the group's two, not the group's twice."""
    pods = [_pod("a"), _pod("b"), _pod("c", phase="Failed")]
    for pod in pods:
        pod["spec"]["resourceClaims"].append({"name": "shared", "resourceClaimName": "g-shared"})
    claims = _claims("a", "b", "c")
    results = [{"driver": "d", "pool": "p", "device": f"channel-{i}"} for i in range(2)]
    claims[("ns", "g-shared")] = {"status": {"allocation": {"devices": {"results": results}}}}
    assert quorum.held_devices(_group(3), pods, lambda ns, n: claims.get((ns, n))) == 4
    assert quorum.incomplete_group_devices([_group(3)], {"g-uid": pods}, lambda ns, n: claims.get((ns, n))) == 4
