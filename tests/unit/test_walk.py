"""The loop's walk through its groups in queue order (`SchedulingLoop._walk`): the groups a walk passed over one after
another are a run, which the next walk on the same reads passes over whole while their verdicts stand; a group
visited, or backing off, between two runs is met on its own each time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from builders import cluster, gang
from phalanx.kinds import KINDS
from phalanx.kube.informers import ClusterView
from phalanx.scheduling import inputs, metrics, shortfall
from phalanx.scheduling.loop import SchedulingLoop

QUIET = ("a", "b", "c", "d")
"""Known short, nothing they read changed: each visit would end where the last did."""


class _Kube:
    """Nothing is written: the visits are recorded instead (`_reconcile`)."""

    def __init__(self) -> None:
        self.api = client.ApiClient()


def _pod_group(uid: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "ml", "name": uid}, "spec": {}}


class _Walks:
    def __init__(self) -> None:
        self.kube = _Kube()
        self.loop = SchedulingLoop(self.kube, ClusterView(self.kube), KINDS)  # type: ignore[arg-type]
        self.looked: list[str] = []
        self.visited: list[str] = []
        self.snapshot = cluster()
        self.groups = {uid: gang(uid, 2)[0] for uid in QUIET}
        for uid in (*QUIET, "visited", "backing-off"):
            self.loop.memory.of(uid)
        self.loop.memory.of("backing-off").backoff = (time.monotonic() + 600, 600.0)
        for uid in QUIET:
            self.short(uid)
        self.loop._passed_over = self._passed_over  # type: ignore[method-assign]
        self.loop._reconcile = self._reconcile  # type: ignore[method-assign]
        order = ["a", "b", "visited", "c", "backing-off", "d"]
        self.loop._ordered = (("reads",), [(_pod_group(uid), []) for uid in order])

    def short(self, uid: str) -> None:
        key = shortfall.group_key(self.groups[uid], self.snapshot, 0)
        self.loop.shortfalls.remember(uid, key, frozenset({"worker-1"}))

    def _passed_over(self, pod_group: dict[str, Any], remembered: Any) -> bool:
        uid = pod_group["metadata"]["uid"]
        self.looked.append(uid)
        if uid not in QUIET:
            return False
        self.loop.line.join(pod_group, self.groups[uid], 0)
        return True

    async def _reconcile(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        self.visited.append(pod_group["metadata"]["uid"])
        return True

    async def walk(self, reads: tuple[Any, ...] = ("reads",)) -> list[Any]:
        self.looked.clear()
        self.visited.clear()
        self.loop.line.clear()
        await self.loop._walk(reads)
        return list(self.loop.line.ahead)


@pytest.fixture
async def walks() -> AsyncIterator[_Walks]:
    made = _Walks()
    yield made
    await made.kube.api.close()


def _runs() -> float:
    return metrics.RUNS_TAKEN._value.get()


async def test_the_next_walk_on_the_same_reads_passes_over_each_run_whole_and_still_visits_the_rest(walks: _Walks) -> None:
    first = await walks.walk()
    assert [a.pod_group["metadata"]["uid"] for a in first] == list(QUIET)
    assert walks.looked == ["a", "b", "visited", "c", "d"] and walks.visited == ["visited"]

    runs = _runs()
    second = await walks.walk()
    assert walks.looked == ["visited"] and walks.visited == ["visited"], "no group of a run looked at; the visited one visited again"
    assert _runs() == runs + 3, "a and b; c; d (the group backing off between them)"
    assert all(now is then for now, then in zip(second, first, strict=True)), "the same line, each as the same Ahead"


async def test_a_run_whose_verdict_was_made_again_is_met_group_by_group_and_new_reads_walk_afresh(walks: _Walks) -> None:
    await walks.walk()
    walks.short("c")  # c planned again and found short: its run is met group by group, the others still whole
    await walks.walk()
    assert walks.looked == ["visited", "c"]
    await walks.walk()
    assert walks.looked == ["visited"], "c passed over again is a run again"

    await walks.walk(reads=("written since",))
    assert walks.looked == ["a", "b", "visited", "c", "d"]


async def test_something_freed_that_one_of_a_run_could_use_breaks_that_run(walks: _Walks) -> None:
    await walks.walk()
    walks.loop.shortfalls.moves.append((walks.loop.shortfalls.epoch + 1, shortfall.PODS_GONE, "worker-1"))
    walks.loop.shortfalls.epoch += 1
    await walks.walk()
    assert walks.looked == ["a", "b", "visited", "c", "d"], "every run could use worker-1"
    walks.loop.shortfalls.moves.append((walks.loop.shortfalls.epoch + 1, shortfall.PODS_GONE, "worker-2"))
    walks.loop.shortfalls.epoch += 1
    await walks.walk()
    assert walks.looked == ["visited"], "none of them can use worker-2"


async def test_a_quiet_memo_is_never_newer_than_the_verdict_it_vouches_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim the group reads is written while the snapshot is built (in its worker thread): the group is still
    found short on that snapshot, and the memo it leaves must carry what it read before the build, or it would vouch
    for the new claim it was never planned with, and the group would be passed over until something else moved."""
    kube = _Kube()
    loop = SchedulingLoop(kube, ClusterView(kube), KINDS)  # type: ignore[arg-type]
    snapshot, group = cluster(), gang("g", 2)[0]
    claims = {"version": "1"}

    async def built(for_group: Any = None) -> Any:
        claims["version"] = "2"  # the watch delivers a write to one of its claims meanwhile
        return snapshot

    monkeypatch.setattr(loop, "_quiet_inputs", lambda pod_group: ("claims", claims["version"]))
    monkeypatch.setattr(loop, "_priority", lambda pod_group: 0)
    monkeypatch.setattr(loop.cache, "snapshot", built)
    monkeypatch.setattr(inputs, "group", lambda *args, **kwargs: group)
    loop.shortfalls.remember("g", shortfall.group_key(group, snapshot, 0), frozenset({"worker-1"}))
    try:
        assert await loop._attempt(_pod_group("g"), [], 2)
        memo = loop.memory.of("g").quiet
        assert memo is not None and memo.inputs == ("claims", "1"), memo
    finally:
        await kube.api.close()
