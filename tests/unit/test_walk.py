"""The loop's walk through its groups in queue order (`SchedulingLoop._walk`): a group whose last visit found it short
or settled is passed over until a write marks it (`hints`), something it could use is freed, or something of its own
falls due; a group backing off is skipped; every other group is visited. The informers are real, fed events by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

import apiobjects as api
from builders import cluster, gang
from phalanx.kinds import KINDS
from phalanx.kube.informers import ClusterView
from phalanx.scheduling import shortfall
from phalanx.scheduling.loop import SchedulingLoop

QUIET = ("a", "b", "c", "d")
"""Found short by their visit, which wrote nothing."""
ORDER = ["a", "b", "running", "c", "backing-off", "d"]


class _Kube:
    """Nothing is written: the visits are recorded instead (`_reconcile`)."""

    def __init__(self) -> None:
        self.api = client.ApiClient()


def _job(name: str) -> list[dict[str, Any]]:
    return api.owned_by(name=name, uid=f"{name}-job")


class _Walks:
    def __init__(self) -> None:
        self.kube = _Kube()
        self.view = ClusterView(self.kube)  # type: ignore[arg-type]
        self.loop = SchedulingLoop(self.kube, self.view, KINDS)  # type: ignore[arg-type]
        self.visited: list[str] = []
        self.snapshot = cluster()
        self.groups = {uid: gang(uid, 2)[0] for uid in QUIET}
        self.objects = {uid: api.pod_group(uid, uid=uid, owner=_job(uid)) for uid in ORDER}
        for uid, obj in self.objects.items():
            self.view.podgroups.apply("ADDED", obj)
            self.view.pods.apply("ADDED", api.pod(f"{uid}-0", owner=_job(uid), gated=True))
            self.view.claims.apply("ADDED", api.claim(f"{uid}-0-gpu"))
        self.view.priorities.apply("ADDED", {"metadata": {"name": "high", "uid": "high-uid"}, "value": 100})
        self.view.nodes.apply("ADDED", {"metadata": {"name": "worker-1", "uid": "w1"}})
        self.loop.members.refresh(list(self.objects.values()))
        self.loop.memory.of("backing-off").backoff = (time.monotonic() + 600, 600.0)
        self.loop.visit = self._reconcile  # type: ignore[method-assign]

    async def _reconcile(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """What the loop's visit does with the memos: cleared, the claims read named, set again when it finds nothing to
        do (a quiet group found short on its key; the running gang calm)."""
        uid = pod_group["metadata"]["uid"]
        self.visited.append(uid)
        remembered = self.loop.memory.of(uid)
        remembered.quiet, remembered.settled = None, False
        self.loop.hints.reads(uid, self.loop.members.facts(pod_group).claims)
        if uid in QUIET:
            key = shortfall.group_key(self.groups[uid], self.snapshot, 0)
            self.loop.shortfalls.remember(uid, key, frozenset({"worker-1"}))
            self.loop.line.join(pod_group, key.group, 0)
            remembered.quiet, remembered.since = key, self.loop.cycle_state.seq
        elif uid == "running":
            remembered.settled, remembered.since = True, self.loop.cycle_state.seq
        return True

    async def walk(self) -> list[str]:
        """One cycle's walk; the groups it visited (the line is in `line`)."""
        self.visited.clear()
        self.loop.line.clear()
        self.loop.cycle_state.seq = self.loop.hints.seq  # as the cycle begins
        await self.loop._walk([(self.objects[uid], []) for uid in ORDER])
        return list(self.visited)

    @property
    def line(self) -> list[str]:
        return [a.pod_group["metadata"]["uid"] for a in self.loop.line.ahead]

    def write(self, obj: dict[str, Any], store: str) -> None:
        """The watch delivers a write to the object."""
        written = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(time.monotonic_ns())}}
        getattr(self.view, store).apply("MODIFIED", written)


@pytest.fixture
async def walks() -> AsyncIterator[_Walks]:
    made = _Walks()
    assert await made.walk() == ["a", "b", "running", "c", "d"], "no memo yet: every group but the one backing off is visited"
    yield made
    await made.kube.api.close()


async def test_groups_that_found_nothing_to_do_are_passed_over_and_keep_their_place_in_the_line(walks: _Walks) -> None:
    assert await walks.walk() == [], "nothing written since: every visit would end where the last did"
    assert walks.line == list(QUIET), "the quiet groups in queue order; the one backing off is not in it"
    passed = [*walks.loop.line.ahead]
    assert await walks.walk() == []
    assert all(now is then for now, then in zip(walks.loop.line.ahead, passed, strict=True)), "each joins as the same Ahead"


@pytest.mark.parametrize(
    ("what", "marks"),
    [
        ("a member written", ["b"]),
        ("the PodGroup written", ["b"]),
        ("a claim its members name written", ["b"]),
        ("a claim no group names written", []),
        ("a pod of no group written", []),
        ("a PriorityClass written", ["a", "b", "running", "c", "d"]),
        ("a node changed", ["running"]),
        ("a node's heartbeat", []),
    ],
)
async def test_each_write_marks_the_groups_whose_visit_it_could_change_and_only_those(walks: _Walks, what: str, marks: list[str]) -> None:
    await walks.walk()
    node = walks.view.nodes.get("", "worker-1")
    assert node is not None
    write = {
        "a member written": lambda: walks.write(api.pod("b-0", owner=_job("b"), gated=True), "pods"),
        "the PodGroup written": lambda: walks.write(walks.objects["b"], "podgroups"),
        "a claim its members name written": lambda: walks.write(api.claim("b-0-gpu", "gpu-0"), "claims"),
        "a claim no group names written": lambda: walks.view.claims.apply("ADDED", api.claim("stray-gpu")),
        "a pod of no group written": lambda: walks.view.pods.apply("ADDED", api.pod("stray", owner=_job("stray"))),
        "a PriorityClass written": lambda: walks.write({"metadata": {"name": "high", "uid": "high-uid"}, "value": 200}, "priorities"),
        "a node changed": lambda: walks.write({**node, "metadata": {**node["metadata"], "labels": {"pool": "x"}}}, "nodes"),
        "a node's heartbeat": lambda: walks.write(node, "nodes"),
    }[what]
    write()
    assert await walks.walk() == marks
    assert await walks.walk() == [], "visited once, passed over again"


async def test_a_write_that_lands_while_the_visit_runs_is_not_lost(walks: _Walks) -> None:
    """The visit read the cycle's objects; a write delivered meanwhile is newer than what it read, so the memo it sets
    does not cover it, and the next cycle visits the group again."""
    visit = walks._reconcile

    async def written_meanwhile(pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        if pod_group["metadata"]["uid"] == "c":
            walks.write(api.claim("c-0-gpu", "gpu-1"), "claims")
        return await visit(pod_group, pods)

    walks.loop.visit = written_meanwhile  # type: ignore[method-assign]
    walks.write(walks.objects["c"], "podgroups")
    assert await walks.walk() == ["c"]
    assert await walks.walk() == ["c"], "the claim written during that visit marks it again"
    walks.loop.visit = visit  # type: ignore[method-assign]
    assert await walks.walk() == ["c"]
    assert await walks.walk() == []


async def test_a_walk_cut_short_keeps_the_marks_of_the_groups_it_did_not_reach(walks: _Walks) -> None:
    walks.write(walks.objects["d"], "podgroups")
    walks.loop.cycle_state.deposed = True  # the Lease lost: the cycle touches no group
    assert await walks.walk() == []
    walks.loop.cycle_state.deposed = False
    assert await walks.walk() == ["d"]


async def test_something_freed_that_a_quiet_group_could_use_gets_it_visited(walks: _Walks) -> None:
    await walks.walk()
    short = walks.loop.shortfalls
    short.epoch += 1
    short.moves.append((short.epoch, shortfall.PODS_GONE, "worker-2"))
    assert await walks.walk() == [], "none of them can use worker-2"
    short.epoch += 1
    short.moves.append((short.epoch, shortfall.PODS_GONE, "worker-1"))
    assert await walks.walk() == list(QUIET), "every one could use worker-1"


async def test_a_deadline_or_counts_due_gets_a_group_visited(walks: _Walks) -> None:
    walks.loop.memory.of("running").due = time.monotonic()
    walks.loop.memory.of("a").counts_due = True
    assert await walks.walk() == ["a", "running"]


async def test_a_whole_cycle_runs_the_walk_and_passes_the_quiet_groups_over(walks: _Walks, caplog: pytest.LogCaptureFixture) -> None:
    """The driver's cycle end to end on the same informers (nothing to repair, point or hold: no API call is needed)."""
    walks.visited.clear()
    await walks.loop.cycle()
    assert walks.visited == [], "every group passed over (or backing off)"
    assert [a.pod_group["metadata"]["uid"] for a in walks.loop.line.ahead] == list(QUIET)
    assert "cycle failed" not in caplog.text
    walks.write(walks.objects["c"], "podgroups")
    await walks.loop.cycle()
    assert walks.visited == ["c"]


async def test_a_holder_whose_back_off_ends_after_the_walk_passed_it_is_still_held_for(walks: _Walks) -> None:
    """The walk skips a group backing off; its back-off may end before the cycle's hold is updated (the walk and the
    releases it drained took that long). The group is then in neither the line nor a back-off that has not ended,
    yet no visit has tried it since its attempt failed: the hold is kept for it, or the devices it waited for go to
    the first pod to ask (the head hold's liveness, `headhold`). Its next visit decides."""
    seen: list[set[str]] = []

    class _Hold:
        settled = False

        async def update(self, *args: Any) -> bool:
            seen.append(set(args[-1]))
            return False

    walks.loop.headhold = _Hold()  # type: ignore[assignment]
    walks.loop.memory.of("backing-off").backoff = (time.monotonic() + 0.05, 0.05)
    assert "backing-off" not in await walks.walk(), "skipped while it backs off"
    await asyncio.sleep(0.1)  # its back-off ends before the hold is updated
    await walks.loop._hold_for_head()
    assert seen == [{"backing-off"}], "its back-off over but no visit since: still backing off for the hold"
    assert await walks.walk() == ["backing-off"], "the next walk visits it"
    await walks.loop._hold_for_head()
    assert seen[-1] == set(), "visited (its attempt did not fail): the hold follows the line again"
