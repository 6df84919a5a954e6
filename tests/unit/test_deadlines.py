"""The bind deadline as an action on its own (`scheduling.deadlines`), without a cluster: what a released gang's visit
decides from its members bound and the time since its release, with the status writes and the teardown recorded."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from phalanx.api import keys, schema, times
from phalanx.scheduling import memory
from phalanx.scheduling.deadlines import Deadlines

DEADLINE = 60.0


class _Status:
    def __init__(self) -> None:
        self.said: list[tuple[bool, str, str]] = []

    async def scheduled(self, pod_group: Any, status: bool, reason: str, message: str, **_: Any) -> None:
        self.said.append((status, reason, message))


class _TearDown:
    freeing = None

    def __init__(self) -> None:
        self.why: list[str] = []

    async def __call__(self, pod_group: Any, pods: Any, reservation: Any, why: str, **_: Any) -> bool:
        self.why.append(why)
        return True


def _deadlines() -> tuple[Deadlines, _Status, _TearDown]:
    status, tear_down = _Status(), _TearDown()
    deadlines = Deadlines(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        memory.Memory(),
        status,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        tear_down,  # type: ignore[arg-type]
        bind_deadline=DEADLINE,
        ready_deadline=0.0,
        ready_backoff=(60.0, 3600.0),
    )
    return deadlines, status, tear_down


def _pod(name: str, node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"nodeName": node} if node else {}}


def _released(seconds_ago: float) -> schema.Reservation:
    at = times.now() - datetime.timedelta(seconds=seconds_ago)
    return schema.Reservation(state="Released", released_at=times.stamp(at))


GROUP = {"metadata": {"namespace": "ml", "name": "g", "uid": "uid-g"}, "spec": {}}


@pytest.mark.parametrize(
    ("bound", "done", "ago", "scheduled", "torn_down"),
    [
        (2, 0, 5.0, True, False),  # minCount bound: Scheduled
        (1, 1, 5.0, True, False),  # a rank that finished before the last was bound counts
        (1, 0, 5.0, False, False),  # short of minCount, within the deadline: waits
        (1, 0, DEADLINE + 5, False, True),  # short of minCount past the deadline: taken down as a unit
        (2, 0, DEADLINE + 5, True, False),  # bound, however late: never taken down
    ],
)
async def test_a_released_gang_is_scheduled_at_min_count_bound_or_taken_down_at_its_bind_deadline(
    bound: int, done: int, ago: float, scheduled: bool, torn_down: bool
) -> None:
    deadlines, status, tear_down = _deadlines()
    pods = [_pod(f"r{i}", "worker-1" if i < bound else None) for i in range(2)]
    on_nodes = [p for p in pods if p["spec"].get("nodeName")]
    assert await deadlines.bound(GROUP, pods, on_nodes, _released(ago), 2, done)
    assert bool(status.said) is scheduled, status.said
    if scheduled:
        assert status.said[0][:2] == (True, keys.SCHEDULED)
        assert status.said[0][2].startswith(f"{bound} of 2 members bound to 1 node(s)")
        assert (", 1 finished" in status.said[0][2]) is bool(done)
    assert bool(tear_down.why) is torn_down, tear_down.why
    if torn_down:
        assert tear_down.why[0].startswith(f"only {bound} of minCount 2 members bound {DEADLINE:.0f}s after release")


async def test_a_release_recorded_without_its_time_is_past_its_deadline() -> None:
    """An older Phalanx recorded no `releasedAt`: a gang that never reached minCount is the stuck case the deadline
    exists for, taken down at once rather than waiting for ever."""
    deadlines, _, tear_down = _deadlines()
    pods = [_pod("r0", "worker-1"), _pod("r1", None)]
    assert await deadlines.bound(GROUP, pods, pods[:1], schema.Reservation(state="Released"), 2, 0)
    assert tear_down.why and "only 1 of minCount 2" in tear_down.why[0]
