"""One Event per gated member of a gang that waits, not one per cycle; a refusal is raised and the member tried again."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from phalanx.api import keys, times
from phalanx.jobs.owner import JOBS
from phalanx.kube.client import ApiError
from phalanx.scheduling import conditions, pointers


class FakeKube:
    def __init__(self, refuse: bool = False) -> None:
        self.names: dict[str, dict[str, Any]] = {}
        self.calls = 0
        self.refuse = refuse

    async def event_once(self, obj: dict[str, Any], *, name: str, type_: str, reason: str, message: str) -> bool:
        self.calls += 1
        if self.refuse:
            raise ApiError(403, "Forbidden", "events is forbidden")
        if name in self.names:
            return False
        self.names[name] = {"object": obj["metadata"]["name"], "reason": reason, "message": message}
        return True


def _waiting(reason: str = keys.UNSCHEDULABLE, status: bool = False, ago: float = 0.0) -> dict[str, Any]:
    """A PodGroupInitiallyScheduled condition as a visit writes it, turned `ago` seconds before now."""
    cond = conditions.condition(keys.INITIALLY_SCHEDULED, status, reason, "why")
    return dict(cond, lastTransitionTime=times.stamp(times.now() - datetime.timedelta(seconds=ago)))


def _group(policy: dict[str, Any], waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    """A group a visit found unschedulable, unless `waiting` says otherwise."""
    return {
        "metadata": {"namespace": "ml", "name": "train-b-pg", "uid": "pg", "labels": {keys.JOB_NAME_LABEL: "train-b"}},
        "spec": {"schedulingPolicy": policy, "disruptionMode": {"all": {}} if "gang" in policy else {"single": {}}},
        "status": {"conditions": [waiting or _waiting()]},
    }


def _pod(name: str, gated: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": name, "uid": f"{name}-uid"},
        "spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}] if gated else []},
    }


def _gated(groups: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[tuple[dict[str, Any], list[Any]]]:
    """What the loop gives: each group's gated live members (`gated_members`, kept while the group stands)."""
    return [(g, pointers.gated_members(g, pods)) for g, pods in groups]


def test_each_gated_member_gets_one_event_naming_its_group_and_explain() -> None:
    kube = FakeKube()
    notes = pointers.Pointers(kube, JOBS.name)  # type: ignore[arg-type]
    groups = _gated([(_group({"gang": {"minCount": 2}}), [_pod("b-0"), _pod("b-1"), _pod("b-2", gated=False)])])
    assert asyncio.run(notes.point(groups)) == 2
    for _ in range(5):  # later cycles write nothing
        assert asyncio.run(notes.point(groups)) == 0
    assert kube.calls == 2
    assert sorted(e["object"] for e in kube.names.values()) == ["b-0", "b-1"]
    event = next(iter(kube.names.values()))
    assert event["reason"] == "WaitingForGang"
    assert event["message"] == (
        "member of PodGroup ml/train-b-pg (gang, minCount 2): held by scheduling.phalanx.dev/gang until the whole group "
        "can be placed; why it waits: kubectl phalanx explain train-b -n ml"
    )
    # a restarted operator finds the Events there and writes none again
    again = pointers.Pointers(kube, JOBS.name)  # type: ignore[arg-type]
    assert asyncio.run(again.point(groups)) == 0 and len(kube.names) == 2


def test_basic_groups_get_none_and_a_refusal_is_raised_and_retried() -> None:
    kube = FakeKube()
    assert asyncio.run(pointers.Pointers(kube, JOBS.name).point(_gated([(_group({"basic": {}}), [_pod("a-0")])]))) == 0  # type: ignore[arg-type]
    refused = FakeKube(refuse=True)
    notes = pointers.Pointers(refused, JOBS.name)  # type: ignore[arg-type]
    groups = [(_group({"gang": {"minCount": 1}}), [_pod("b-0")])]
    with pytest.raises(ApiError):
        asyncio.run(notes.point(groups))
    refused.refuse = False
    assert asyncio.run(notes.point(groups)) == 1


def test_event_names_are_valid_whatever_the_pod_name() -> None:
    uid = "0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b"
    name = pointers.event_name({"metadata": {"name": "x" * 253, "uid": uid}})
    assert len(name) <= 253 and name == f"{'x' * 200}.{uid}.gang"


def test_a_cycle_writes_at_most_per_cycle_events_and_the_next_cycles_the_rest() -> None:
    """1,000 gangs of 3 submitted at once: the cycle that sees them must not wait for 3,000 writes before it plans."""
    kube = FakeKube()
    notes = pointers.Pointers(kube, JOBS.name)  # type: ignore[arg-type]
    groups = [(_group({"gang": {"minCount": 3}}), [_pod(f"g{g}-{i}") for i in range(3)]) for g in range(100)]
    assert asyncio.run(notes.point(groups)) == pointers.PER_CYCLE == kube.calls
    total = pointers.PER_CYCLE
    while written := asyncio.run(notes.point(groups)):
        assert written <= pointers.PER_CYCLE
        total += written
    assert total == len(kube.names) == 300


@pytest.mark.parametrize(
    ("waiting", "members", "pointed"),
    [
        (None, 2, False),  # never visited: only queued for its turn
        ((keys.UNSCHEDULABLE, False, 0), 2, True),  # an attempt failed: at once, as kube-scheduler's FailedScheduling
        ((keys.PENDING, False, pointers.WAITED + 600), 2, False),  # its members there, queued for its turn: on its way
        ((keys.PREEMPTING, False, pointers.WAITED + 600), 2, False),
        ((keys.PENDING, False, 0), 1, False),  # short of members, which its owner is making
        ((keys.PENDING, False, pointers.WAITED + 2), 1, True),  # short of members for long: it waits for them
        ((keys.DISRUPTED, False, pointers.WAITED - 5), 1, False),  # torn down, its members being made again
        ((keys.DISRUPTED, False, pointers.WAITED + 2), 1, True),
        ((keys.SCHEDULED, True, 3600), 1, False),  # placed; a member gated now is a late one on its way
    ],
)
def test_only_the_members_of_a_gang_that_waits_are_pointed(waiting: tuple[str, bool, float] | None, members: int, pointed: bool) -> None:
    """A burst's gangs queued for their turn get no Event each (2,000 at 5,000 nodes kept the API server from the
    releases); a gang that cannot be placed, or has long lacked members, does. `waiting`: its condition's (reason,
    status, seconds ago); `members`: of its minCount 2, gated."""
    group = _group({"gang": {"minCount": 2}})
    group["status"] = {"conditions": [_waiting(waiting[0], status=waiting[1], ago=waiting[2])]} if waiting else {}
    kube = FakeKube()
    notes = pointers.Pointers(kube, JOBS.name)  # type: ignore[arg-type]
    assert asyncio.run(notes.point(_gated([(group, [_pod(f"b-{i}") for i in range(members)])]))) == (members if pointed else 0)
    assert kube.calls == (members if pointed else 0)


def test_a_gang_short_of_members_is_pointed_once_it_has_waited() -> None:
    """The same members, given again each cycle, are looked at again until their group is due."""
    group = _group({"gang": {"minCount": 2}}, _waiting(keys.PENDING))
    kube = FakeKube()
    notes = pointers.Pointers(kube, JOBS.name)  # type: ignore[arg-type]
    gated = _gated([(group, [_pod("b-0")])])
    assert asyncio.run(notes.point(gated)) == 0
    group["status"]["conditions"][0]["lastTransitionTime"] = _waiting(ago=pointers.WAITED)["lastTransitionTime"]
    assert asyncio.run(notes.point(gated)) == 1 and asyncio.run(notes.point(gated)) == 0 and kube.calls == 1
