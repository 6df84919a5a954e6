"""Which members of a running group are lost: evicted, preempted, deleted, failed, or on a node that is gone; never a success."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api import schema
from phalanx.kube.informers import Finished
from phalanx.scheduling.disruption import cause, current, losses, preempted_by


def pod(
    name: str, *, phase: str = "Running", node: str = "worker-1", deleting: bool = False, disruption: str | None = None, exit_code: int = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if disruption:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": disruption}]
    if exit_code:
        status["containerStatuses"] = [{"name": "rank", "state": {"terminated": {"exitCode": exit_code}}}]
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


NODES = {"worker-1", "worker-2"}


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (pod("a"), None),
        (pod("a", phase="Succeeded"), None),
        (pod("a", phase="Succeeded", deleting=True), None),
        (pod("a", deleting=True, disruption="EvictionByEvictionAPI"), "EvictionByEvictionAPI"),
        (pod("a", deleting=True, disruption="PreemptionByScheduler"), "PreemptionByScheduler"),
        (pod("a", deleting=True), "deleted"),
        (pod("a", phase="Failed", exit_code=1), "failed: container rank exited 1"),
        (pod("a", node="worker-9"), "node worker-9 is gone"),
        (None, "deleted"),
    ],
)
def test_cause(member: dict | None, expected: str | None) -> None:
    assert cause(member, NODES) == expected


def test_only_members_of_this_incarnation_count() -> None:
    record = schema.Reservation(
        state="Released",
        placements=[
            schema.PodPlacement(name="new-0", uid="uid-new-0", node="worker-1"),
            schema.PodPlacement(name="new-1", uid="uid-new-1", node="worker-2"),
        ],
    )
    earlier = pod("old-0", phase="Failed", exit_code=1)  # failed in the previous incarnation, kept by the Job
    (loss,) = losses(
        record, [earlier, pod("new-0"), pod("new-1", node="worker-2", deleting=True, disruption="EvictionByEvictionAPI")], NODES
    )
    assert (loss.name, loss.cause) == ("new-1", "EvictionByEvictionAPI")
    (gone,) = losses(record, [pod("new-1", node="worker-2")], NODES)
    assert (gone.name, gone.cause) == ("new-0", "deleted")


def test_a_member_removed_after_it_succeeded_is_not_lost() -> None:
    """PodGC, a cleanup or a lowered completions count removes a finished pod: its work is done, the gang is whole."""
    record = schema.Reservation(
        state="Released",
        placements=[schema.PodPlacement(name=n, uid=f"uid-{n}", node="worker-1") for n in ("done", "gone", "running")],
    )
    finished = Finished()
    finished.note(pod("done", phase="Succeeded"))
    finished.note(pod("gone"))  # removed while it ran: no success to remember
    (loss,) = losses(record, [pod("running")], NODES, finished)
    assert (loss.name, loss.cause) == ("gone", "deleted")


def test_finished_pods_are_remembered_up_to_a_bound() -> None:
    finished = Finished(keep=2)
    for name in ("a", "b", "c"):
        finished.note(pod(name, phase="Succeeded"))
    assert "uid-a" not in finished and "uid-b" in finished and "uid-c" in finished


def test_the_record_keeps_only_this_incarnations_members_when_late_ones_join() -> None:
    """A single-mode gang replaces lost ranks for weeks: its record must not grow with each replacement."""
    claim = lambda n: schema.ClaimReservation(name=f"c-{n}", uid=f"cuid-{n}", node="worker-1", results=[])  # noqa: E731
    record = schema.Reservation(
        state="Released",
        placements=[schema.PodPlacement(name=n, uid=f"uid-{n}", node="worker-1") for n in ("run", "failed", "gone", "done")],
        claims=[claim(n) for n in ("run", "failed", "gone", "done")],
    )
    finished = Finished()
    finished.note(pod("done", phase="Succeeded"))
    kept = current(record, [pod("run"), pod("failed", phase="Failed", exit_code=1)], {"cuid-run", "cuid-failed"}, finished)
    assert [p.name for p in kept.placements] == ["run", "done"]
    assert [c.name for c in kept.claims] == ["c-run", "c-failed"]


def test_a_preempted_member_reads_the_same_however_far_it_has_gone() -> None:
    """`single` sees the victim deleted, `all` sees it marked by the API server first: both say who preempted it, and a
    cause once recorded in status.lost stays as the pod goes."""
    record = schema.Reservation(state="Released", placements=[schema.PodPlacement(name="a", uid="uid-a", node="worker-1")])
    by_whom = preempted_by("ml-team/train-urgent", 10000)
    assert by_whom == "preempted by ml-team/train-urgent, priority 10000"
    marked = pod("a", deleting=True, disruption="EvictionByEvictionAPI")
    for seen in ([marked], []):  # terminating with the API server's mark, then gone
        (loss,) = losses(record, seen, NODES, preempted={"uid-a": by_whom})
        assert loss.cause == by_whom
        (loss,) = losses(record, seen, NODES, known={"uid-a": by_whom})  # the preemption over: status.lost remembers
        assert loss.cause == by_whom
    ours = pod("a", deleting=True, disruption="PreemptedByGang")
    ours["status"]["conditions"][0]["message"] = by_whom
    assert cause(ours, NODES) == by_whom
