"""Releases under way: counted as done by the plans made meanwhile, never twice once the watch shows them, and never
more at once than the concurrency allows."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from apiobjects import pod_group
from phalanx.api import keys
from phalanx.planner import Fits, plan
from phalanx.planner.queue import devices_of, with_plan
from phalanx.scheduling import assumed, inputs, snapshots

JSON = dict[str, Any]
NODES = ("n1", "n2")


def _node(name: str) -> JSON:
    return {"metadata": {"name": name, "uid": f"{name}-uid"}, "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def _slice(node: str) -> JSON:
    return {
        "metadata": {"name": f"{node}-gpu", "uid": f"{node}-slice"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(2)],
        },
    }


def _claim(name: str) -> JSON:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid"}, "spec": {"devices": {"requests": [request]}}, "status": {}}


def _member(name: str) -> JSON:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", "labels": {"gang": name[0]}},
        "spec": {
            "schedulingGates": [{"name": keys.SCHEDULING_GATE}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        },
        "status": {"phase": "Pending"},
    }


CLASSES = [{"metadata": {"name": "gpu"}, "spec": {}}]


def _cluster(names: tuple[str, ...]) -> tuple[list[JSON], list[JSON], list[JSON], list[JSON]]:
    return [_node(n) for n in NODES], [_member(n) for n in names], [_slice(n) for n in NODES], [_claim(f"{n}-gpu") for n in names]


def _plan(snapshot: Any, gang: str, pods: list[JSON]) -> Fits:
    members = [p for p in pods if p["metadata"]["name"].startswith(gang)]
    fits = plan(snapshot, inputs.group(pod_group(gang), members, len(members)))
    assert isinstance(fits, Fits), fits
    return fits


def test_a_release_under_way_is_counted_as_its_plan_says_and_the_next_plan_takes_other_devices() -> None:
    nodes, pods, slices, claims = _cluster(("a1", "a2", "b1", "b2"))
    before = snapshots.build(nodes, pods, slices, claims, CLASSES)
    first = _plan(before, "a", pods)
    under_way = snapshots.build(nodes, pods, slices, claims, CLASSES, assumed=assumed.of(first))
    expected = with_plan(before, first)
    assert under_way.held == expected.held == devices_of(first)
    assert {n.name: dict(n.requested) for n in under_way.nodes} == {n.name: dict(n.requested) for n in expected.nodes}
    assert sorted((p.name, p.node) for p in under_way.pods) == sorted((p.name, p.node) for p in expected.pods)
    second = _plan(under_way, "b", pods)
    assert not devices_of(second) & devices_of(first), "the next plan leaves the devices of the release under way alone"
    assert devices_of(_plan(before, "b", pods)) & devices_of(first), "without the assumption it would have taken them"


def test_a_release_the_watch_shows_is_counted_once() -> None:
    nodes, pods, slices, claims = _cluster(("a1", "a2"))
    fits = _plan(snapshots.build(nodes, pods, slices, claims, CLASSES), "a", pods)
    # the watch as the release leaves it: every claim allocated as planned, every member's gate lifted and pinned
    written = copy.deepcopy(claims)
    for obj in written:
        (planned,) = [c for c in fits.claims if c.name == obj["metadata"]["name"]]
        results = [{"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device} for r in planned.results]
        obj["status"]["allocation"] = {"devices": {"results": results}}
    released = copy.deepcopy(pods)
    for pod in released:
        pod["spec"]["schedulingGates"] = []
    pins = {m.uid: node for m, node in fits.placements}
    shown = snapshots.build(nodes, released, slices, written, CLASSES, pinned=pins)
    assert shown.held == devices_of(fits)
    assert snapshots.build(nodes, released, slices, written, CLASSES, pinned=pins, assumed=assumed.of(fits)) == shown
    # halfway: claims written, members still gated: the members from the assumption, the devices from the watch
    halfway = snapshots.build(nodes, pods, slices, written, CLASSES, assumed=assumed.of(fits))
    assert halfway == shown


def test_a_share_under_way_consumes_capacity_until_its_claim_shows_it() -> None:
    shares = assumed.Assumption({}, {("ml", "c"): assumed.ClaimUse("c-uid", (), ((("gpu.example.com", "n1", "gpu-0"), {"memory": 4}),))})
    nodes, _, slices, _ = _cluster(())
    unwritten = _claim("c")
    built = snapshots.build(nodes, [], slices, [unwritten], CLASSES, assumed=shares)
    assert dict(built.shared[("gpu.example.com", "n1", "gpu-0")]) == {"memory": 4}
    assert not built.held
    another = copy.deepcopy(unwritten)
    another["metadata"]["uid"] = "recreated"
    again = snapshots.build(nodes, [], slices, [another], CLASSES, assumed=shares)
    assert again.shared == built.shared, "a claim of that name made again is not the one the release writes: still counted"
    written = copy.deepcopy(unwritten)
    written["status"]["allocation"] = {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": "gpu.example.com",
                    "pool": "n1",
                    "device": "gpu-0",
                    "shareID": "s1",
                    "consumedCapacity": {"memory": "4"},
                }
            ]
        }
    }
    shown = snapshots.build(nodes, [], slices, [written], CLASSES)
    assert snapshots.build(nodes, [], slices, [written], CLASSES, assumed=shares) == shown
    assert dict(shown.shared[("gpu.example.com", "n1", "gpu-0")]) == {"memory": 4}


def _fits(uid: str) -> Fits:
    nodes, pods, slices, claims = _cluster(("a1",))
    for pod in pods:
        pod["metadata"]["uid"] = uid
    return _plan(snapshots.build(nodes, pods, slices, claims, CLASSES), "a", pods)


def test_releases_run_at_most_concurrency_at_once_and_their_assumptions_go_when_they_end() -> None:
    async def scenario() -> None:
        releases = assumed.Releases(concurrency=2)
        gates = {name: asyncio.Event() for name in ("x", "y", "z")}
        ended: list[str] = []

        async def release(name: str) -> None:
            await gates[name].wait()
            ended.append(name)

        await releases.start("x", _fits("x-member"), release("x"))
        assert releases.under_way() == 1, "one of two under way: the loop goes on planning"
        assert releases.assumed().pods == {"x-member": "n1"}
        version = releases.version
        third = asyncio.create_task(releases.start("y", _fits("y-member"), release("y")))
        await asyncio.sleep(0.05)
        assert not third.done(), "two under way: the loop waits for one to end"
        assert releases.version > version
        gates["x"].set()
        await asyncio.wait_for(third, 1)
        assert ended == ["x"]
        assert set(releases.assumed().pods) == {"y-member"}, "x ended: its assumption went with it"
        gates["y"].set()
        await releases.start("z", _fits("z-member"), release("z"))
        gates["z"].set()
        await releases.drain()
        assert sorted(ended) == ["x", "y", "z"]
        assert releases.under_way() == 0
        assert releases.assumed() == assumed.NOTHING

    asyncio.run(scenario())


def test_with_concurrency_one_a_release_has_ended_when_it_is_started() -> None:
    async def scenario() -> None:
        releases = assumed.Releases(concurrency=1)
        ended: list[str] = []

        async def release() -> None:
            await asyncio.sleep(0.05)
            ended.append("x")

        await releases.start("x", _fits("x-member"), release())
        assert ended == ["x"]

    asyncio.run(scenario())


def test_cancelled_releases_stop_where_they_are() -> None:
    async def scenario() -> None:
        releases = assumed.Releases(concurrency=4)
        stopped: list[str] = []
        begun = asyncio.Event()

        async def release() -> None:
            begun.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                stopped.append("x")
                raise

        await releases.start("x", _fits("x-member"), release())
        await begun.wait()
        releases.cancel()
        await asyncio.wait_for(releases.drain(), 1)
        assert stopped == ["x"]
        assert releases.under_way() == 0

    asyncio.run(scenario())


def test_a_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        assumed.Releases(concurrency=0)
