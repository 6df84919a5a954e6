"""phalanx_incomplete_group_devices: which gangs' devices count, from API-shaped objects."""

from __future__ import annotations

from typing import Any

from apiobjects import claim, lookup, pod, pod_group
from phalanx.scheduling import quorum


def _group(min_count: int = 2, *, scheduled: bool = True, reservation: bool = True, basic: bool = False) -> dict[str, Any]:
    return pod_group("g", min_count=min_count, basic=basic, scheduled=scheduled, reservation="Released" if reservation else None)


def _pod(name: str, *, node: str | None = "n1", phase: str = "Running") -> dict[str, Any]:
    return pod(name, node=node, phase=phase)


def _claims(*names: str) -> Any:
    return lookup(*(claim(f"{n}-gpu", f"{n}-dev") for n in names))


def test_a_gang_at_quorum_holds_nothing_below_it() -> None:
    assert quorum.held_devices(_group(), [_pod("a"), _pod("b")], _claims("a", "b")) == 0


def test_a_gang_that_lost_a_member_counts_the_devices_the_others_hold() -> None:
    pods = [_pod("a"), _pod("b", phase="Failed")]
    assert quorum.held_devices(_group(), pods, _claims("a", "b")) == 1


def test_a_member_that_finished_counts_toward_min_count_and_its_gang_holds_nothing_below_it() -> None:
    pods = [_pod("a"), _pod("b", phase="Succeeded")]
    assert quorum.held_devices(_group(), pods, _claims("a", "b")) == 0


def test_a_release_in_progress_is_left_out_and_a_basic_group_never_counts() -> None:
    pods = [_pod("a", node=None)]
    assert quorum.held_devices(_group(scheduled=False), pods, _claims("a")) == 0
    assert quorum.held_devices(_group(scheduled=False, reservation=False), pods, _claims("a")) == 1
    assert quorum.held_devices(_group(basic=True), [_pod("a", phase="Failed")], _claims("a")) == 0


def test_the_group_s_claim_counts_once_however_many_members_use_it() -> None:
    """Each rank has a claim of its own and uses the group's claim of two devices: two ranks left of minCount 3 hold
    their two devices and the group's two, not the group's twice."""
    pods = [pod(n, node="n1", phase=p, claims=(f"{n}-gpu", "g-shared")) for n, p in (("a", "Running"), ("b", "Running"), ("c", "Failed"))]
    claims = lookup(*(claim(f"{n}-gpu", f"{n}-dev") for n in "abc"), claim("g-shared", "channel-0", "channel-1"))
    assert quorum.held_devices(_group(3), pods, claims) == 4
