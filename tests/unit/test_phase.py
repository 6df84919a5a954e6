"""The loop's decisions, from API-shaped objects and no cluster: one ladder, read by the loop and by explain."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from apiobjects import claim, pod, pod_group
from phalanx.jobs.owner import JOBS
from phalanx.scheduling import accessors, disruption, explain_view, explanation, phase
from phalanx.scheduling.phase import OwnerState, Phase

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def _group(*, reservation: str | None = None, scheduled: bool = False, min_count: int = 2, **fields: Any) -> dict[str, Any]:
    placements = [{"name": f"rank-{i}", "uid": f"rank-{i}-uid", "node": "n1"} for i in range(min_count)]
    return pod_group(min_count=min_count, reservation=reservation, placements=placements, scheduled=scheduled or None, **fields)


def _pod(i: int, *, gated: bool = False, node: str | None = None, phase_: str = "Running") -> dict[str, Any]:
    return pod(f"rank-{i}", gated=gated, node=node, phase=phase_)


def _claims(*ranks: int) -> dict[tuple[str, str], dict[str, Any]]:
    return {("ml", f"rank-{i}-gpu"): claim(f"rank-{i}-gpu") for i in ranks}


def _classify(group: dict[str, Any], pods: list[dict[str, Any]], claims=None, **found: Any) -> Phase:
    claims = claims if claims is not None else _claims(*range(len(pods)))
    live = [p for p in pods if p["status"]["phase"] not in ("Succeeded", "Failed")]
    return phase.classify(phase.read(group, live, lambda ns, n: claims.get((ns, n)), **found))


GATED = [_pod(0, gated=True), _pod(1, gated=True)]
BOUND = [_pod(0, node="n1"), _pod(1, node="n1")]


@pytest.mark.parametrize(
    ("group", "pods", "found", "expected"),
    [
        (_group(reservation="Reserving"), GATED, {}, Phase.RESUMING),
        (_group(reservation="Reserving", scheduled=True), BOUND, {"lost": True}, Phase.RESUMING),
        (_group(basic=True, mode="single"), GATED, {}, Phase.EACH),
        (_group(scheduled=True), BOUND, {}, Phase.EACH),
        (_group(reservation="Released", scheduled=True), BOUND, {"lost": True, "owner": OwnerState.SUSPENDED}, Phase.SUSPENDED),
        (_group(reservation="Released"), GATED, {"lost": True, "owner": OwnerState.SUSPENDED}, Phase.SUSPENDED),
        (_group(reservation="Released", scheduled=True), BOUND, {"lost": True, "owner": OwnerState.FINISHED}, Phase.FINISHED),
        (_group(reservation="Released", scheduled=True), BOUND[:1], {"lost": True}, Phase.LOST),
        (_group(reservation="Released", scheduled=True), BOUND[:1], {"lost": True, "owner": OwnerState.GONE}, Phase.GOING),
        (_group(reservation="Released", scheduled=True, mode="single"), BOUND[:1], {"lost": True}, Phase.BELOW_MIN),
        (_group(reservation="Released", scheduled=True, mode="single"), BOUND[:1], {"lost": True, "done": 1}, Phase.RUNNING),
        (_group(reservation="Released", scheduled=True), BOUND, {}, Phase.RUNNING),
        (_group(reservation="Released"), [_pod(0), _pod(1)], {"lost": True}, Phase.LOST),
        (_group(reservation="Released"), [_pod(0), _pod(1)], {"lost": True, "owner": OwnerState.GONE}, Phase.GOING),
        (_group(reservation="Released", mode="single"), [_pod(0), _pod(1)], {"lost": True}, Phase.AWAITING_BIND),
        (_group(reservation="Released"), [_pod(0), _pod(1)], {}, Phase.AWAITING_BIND),
        (_group(), [_pod(0, phase_="Failed")], {}, Phase.IDLE),
        (_group(), GATED[:1], {}, Phase.QUORUM),
        (_group(min_count=4), GATED[:1], {"done": 3}, Phase.PLANNABLE),  # ranks 0-2 finished, rank 3 replaced alone
        (_group(min_count=4), GATED[:1], {"done": 2}, Phase.QUORUM),
        (_group(reservation="Released", min_count=4), [_pod(3, node="n1")], {"done": 3}, Phase.AWAITING_BIND),
        (_group(), GATED, {"claims": _claims(0)}, Phase.QUORUM),
        (_group(), GATED, {}, Phase.PLANNABLE),
        (_group(nomination={"nominatedAt": "2026-12-01T00:00:00Z"}), GATED, {}, Phase.PREEMPTING),
    ],
)
def test_the_ladder(group: dict[str, Any], pods: list[dict[str, Any]], found: dict[str, Any], expected: Phase) -> None:
    claims = found.pop("claims", None)
    assert _classify(group, pods, claims, **found) is expected


def test_members_done_are_counted_toward_min_count_of_every_incarnation() -> None:
    """Succeeded pods of the owner count, whether or not the record still places them; one removed after it
    Succeeded counts only while the record places it (the informer remembers its uid)."""
    group = _group(reservation="Released", min_count=4)
    pods = [_pod(0, phase_="Succeeded"), pod("rank-9", phase="Succeeded"), _pod(1, phase_="Failed"), _pod(2, node="n1")]
    assert disruption.finished(group, pods, gone={"rank-3-uid", "elsewhere-uid"}) == 3
    assert disruption.finished(_group(min_count=4), pods, gone={"rank-3-uid"}) == 2
    assert phase.Facts(gang=True, reservation=None, scheduled=False, min_count=4, done=6).needed == 1


def test_members_done_that_a_teardown_kept_count_once_their_pods_are_removed() -> None:
    """The teardown ends the record that told a member removed after it Succeeded; what it keeps in
    `status.finished` (at most minCount uids) still counts, once and only once beside a pod still there."""
    group = _group(reservation="Released", min_count=2)
    pods = [_pod(0, phase_="Succeeded"), pod("rank-9", phase="Succeeded")]
    kept = disruption.kept_finished(group, pods, gone={"rank-1-uid"})
    assert kept is not None and len(kept) == 2, "at most minCount uids are kept"
    after = _group(min_count=2)
    after["status"] = {"finished": kept}
    assert disruption.finished(after, []) == 2, "counted with every pod removed and no record left"
    assert disruption.finished(after, pods) == 3, "a pod still there and kept is counted once"
    assert disruption.kept_finished(_group(min_count=2), []) is None, "nothing finished: nothing written"


def test_a_podgroup_without_a_disruption_mode_is_refused_not_read_as_single() -> None:
    """The operator always writes one (a gang's default is `all`): a PodGroup without it is not one the loop made."""
    group = _group()
    del group["spec"]["disruptionMode"]
    with pytest.raises(ValueError, match="disruptionMode"):
        _classify(group, GATED)


def _explained(
    group: dict[str, Any], pods: list[dict[str, Any]], claims: dict[tuple[str, str], dict[str, Any]]
) -> explain_view.Explanation:
    objects = explain_view.Objects(pods=pods, claims=list(claims.values()), podgroups=[group], nodes=[{"metadata": {"name": "n1"}}])
    return explanation.explain(objects, group, NOW, JOBS)


def test_explain_names_the_phase_the_loop_acts_on() -> None:
    released = _group(reservation="Released", scheduled=True)
    lost = [_pod(0, node="n1"), _pod(1, node="n1", phase_="Failed")]
    assert disruption.losses(accessors.reservation(released), lost, {"n1"}), "the failed member is a loss"
    cases = [
        (_group(), GATED[:1], "Waiting"),
        (_group(reservation="Released"), [_pod(0), _pod(1)], "Releasing"),
        (_group(reservation="Released", scheduled=True), BOUND, "Running"),
        (released, lost, "Disrupted"),
    ]
    for group, pods, state in cases:
        assert _explained(group, pods, _claims(0, 1)).state == state, state
    assert _explained(_group(mode="all"), GATED, {}).disruption_mode == "all"


def test_every_phase_but_resuming_has_one_action_in_the_loops_table() -> None:
    """`_reconcile` is a dispatch on `classify`: a phase added without an action would fail here, not in a cluster."""
    from phalanx.scheduling.visit import Visits

    assert set(Visits.ACTIONS) == set(Phase) - {Phase.RESUMING}
