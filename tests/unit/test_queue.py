"""The queue: its order, where a group stands, and whether a plan behind takes room a group ahead could use now."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from builders import GPU, cluster, gang, port, with_claims, with_rules
from phalanx.api import keys
from phalanx.kube.client import ApiError
from phalanx.planner import DeviceMatcher, Fits, plan
from phalanx.planner.model import Snapshot, frozen_map
from phalanx.planner.queue import hold_for, takes_room, with_plan
from phalanx.scheduling import headhold, queue, shortfall


def _fits(snapshot, group) -> Fits:
    result = plan(snapshot, group)
    assert isinstance(result, Fits), result
    return result


def _two_gangs(high_size: int, low_size: int):
    high, high_claims = gang("high", high_size)
    low, low_claims = gang("low", low_size)
    return with_claims(cluster(), [*high_claims, *low_claims]), high, low


def test_a_plan_behind_that_leaves_no_room_for_the_group_ahead_takes_its_room() -> None:
    snapshot, high, low = _two_gangs(4, 4)  # 6 GPUs: each fits alone, not both
    assert takes_room(snapshot, high, _fits(snapshot, low))


def test_a_plan_behind_that_leaves_the_group_ahead_its_room_takes_nothing() -> None:
    snapshot, high, low = _two_gangs(4, 2)
    assert not takes_room(snapshot, high, _fits(snapshot, low))


def test_a_group_ahead_that_cannot_fit_on_all_the_free_room_holds_nothing_back() -> None:
    """Backfill: 2 GPUs free, the group ahead needs 4, the one behind 2."""
    high, high_claims = gang("high", 4)
    low, low_claims = gang("low", 2)
    snapshot = with_claims(cluster(held=[(GPU, "worker-1", "gpu-0"), (GPU, "worker-1", "gpu-1"), (GPU, "worker-2", "gpu-0")]), [])
    snapshot = with_claims(snapshot, [*high_claims, *low_claims])
    assert not isinstance(plan(snapshot, high), Fits)
    assert not takes_room(snapshot, high, _fits(snapshot, low))


def test_with_plan_counts_the_members_requests_devices_and_pods_on_their_nodes() -> None:
    snapshot, _, low = _two_gangs(4, 2)
    low = with_rules(low, host_ports=(port(8080),))
    fits = _fits(snapshot, low)
    after = with_plan(snapshot, fits)
    used = {n for _, n in fits.placements}
    for before, now in zip(snapshot.nodes, after.nodes, strict=True):
        placed = sum(1 for _, n in fits.placements if n == before.name)
        assert now.requested.get("pods", 0) - before.requested.get("pods", 0) == placed
        assert now.requested.get("cpu", 0) - before.requested.get("cpu", 0) == 50 * placed
    assert after.held - snapshot.held == {r.device_id for c in fits.claims for r in c.results}
    assert len(after.held - snapshot.held) == 2
    assert {(p.name, p.node) for p in after.pods} == {(m.name, n) for m, n in fits.placements}
    assert all(p.host_ports for p in after.pods) and {p.node for p in after.pods} == used
    # what the snapshot now shows is taken: the same gang planned again finds only what is left
    five, claims = gang("five", 5)
    assert isinstance(plan(with_claims(snapshot, claims), five), Fits)
    assert not isinstance(plan(with_claims(after, claims), five), Fits)


def _pod_group(name: str, created: str, uid: str | None = None, *, gang: bool = True, reservation: dict | None = None) -> dict:
    status = {"reservation": reservation} if reservation else {}
    policy = {"gang": {"minCount": 1}} if gang else {"basic": {}}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid or name, "creationTimestamp": created},
        "spec": {"schedulingPolicy": policy, "disruptionMode": {"all": {}} if gang else {"single": {}}},
        "status": status,
    }


def _gated() -> dict:
    return {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}, "status": {"phase": "Pending"}}


def test_the_order_is_priority_then_age_then_name() -> None:
    groups = [
        _pod_group("b-old-low", "2025-01-01T00:00:00Z"),
        _pod_group("c-new-high", "2025-01-03T00:00:00Z"),
        _pod_group("a-old-high", "2025-01-02T00:00:00Z"),
        _pod_group("a-new-high", "2025-01-03T00:00:00Z"),
    ]
    priority = {"b-old-low": 100, "c-new-high": 10000, "a-old-high": 10000, "a-new-high": 10000}
    ordered = sorted(groups, key=lambda g: queue.order(g, priority[g["metadata"]["name"]]))
    assert [g["metadata"]["name"] for g in ordered] == ["a-old-high", "a-new-high", "c-new-high", "b-old-low"]


def test_positions_count_only_gangs_waiting_for_their_first_placement() -> None:
    groups = [
        _pod_group("low", "2025-01-01T00:00:00Z"),
        _pod_group("high", "2025-01-02T00:00:00Z"),
        _pod_group("placed", "2025-01-01T00:00:00Z", reservation={"state": "Released", "placements": [], "claims": []}),
        _pod_group("basic", "2025-01-01T00:00:00Z", gang=False),
        _pod_group("no-pods", "2025-01-01T00:00:00Z"),
    ]
    pods_of = {g["metadata"]["uid"]: [_gated()] for g in groups if g["metadata"]["name"] != "no-pods"}
    priority = {"low": 100, "high": 10000}
    got = queue.positions(groups, pods_of, lambda g: priority.get(g["metadata"]["name"], 0))
    assert got == {"high": (1, 2), "low": (2, 2)}


def test_the_hold_for_the_head_is_its_plan_on_the_cluster_as_if_no_device_were_in_use() -> None:
    """Every GPU in use: the 4-rank gang's hold names 4 devices packed on 2 nodes, and leaves the third node's for backfill."""
    big, claims = gang("big", 4)
    every = [d.id for d in cluster().devices]
    snapshot = with_claims(cluster(held=every), claims)
    assert not isinstance(plan(snapshot, big), Fits)
    held = hold_for(replace(snapshot, held=frozenset()), big)
    assert held is not None and len(held) == 4
    assert len({pool for _, pool, _ in held}) == 2


def test_a_hold_stays_on_its_devices_while_they_serve_and_shrinks_with_the_gang() -> None:
    big, claims = gang("big", 4)
    empty = with_claims(cluster(), claims)
    kept = frozenset({(GPU, "worker-2", "gpu-0"), (GPU, "worker-2", "gpu-1"), (GPU, "worker-3", "gpu-0"), (GPU, "worker-3", "gpu-1")})
    assert hold_for(empty, big) != kept, "the test's hold is not where a fresh plan would put it"
    assert hold_for(empty, big, kept) == kept
    smaller = replace(big, min_count=2, members=big.members[:2])
    shrunk = hold_for(empty, smaller, kept)
    assert shrunk is not None and len(shrunk) == 2 and shrunk < kept
    five, five_claims = gang("five", 5)
    moved = hold_for(with_claims(empty, five_claims), five, kept)
    assert moved is not None and len(moved) == 5, "a hold too small for the gang is planned afresh"


def test_no_hold_for_a_gang_that_cannot_fit_even_on_an_empty_cluster() -> None:
    huge, claims = gang("huge", 7)
    assert hold_for(with_claims(cluster(), claims), huge) is None


def test_devices_held_for_others_stay_out_of_the_hold() -> None:
    """A preemptor's devices (in `held` of the emptied snapshot) are not the head's to hold."""
    big, claims = gang("big", 4)
    theirs = frozenset({(GPU, "worker-1", "gpu-0"), (GPU, "worker-1", "gpu-1")})
    held = hold_for(with_claims(cluster(held=theirs), claims), big)
    assert held is not None and not held & theirs


def _podgroup(uid: str, hold: dict | None = None, since: str | None = None, annotations: dict | None = None) -> dict:
    status: dict = {"conditions": []}
    if since:
        status["conditions"].append(
            {"type": keys.INITIALLY_SCHEDULED, "status": "False", "reason": "Unschedulable", "lastTransitionTime": since}
        )
    if hold:
        status["hold"] = hold
    meta = {"uid": uid, "namespace": "ml", "name": uid, "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations or {}}
    return {"metadata": meta, "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}, "status": status}


def test_what_is_held_counts_as_held_for_every_group_but_the_holder() -> None:
    record = {"devices": [f"{GPU}/worker-1/gpu-0"], "heldAt": "2026-01-01T00:10:00Z", "waitingSince": "2026-01-01T00:05:00Z"}
    holder, other = _podgroup("holder", record), _podgroup("other")
    rank = {"holder": 100, "other": 100, "urgent": 10000}
    priority = lambda g: rank[g["metadata"]["uid"]]  # noqa: E731
    held = headhold.from_status([other, holder], priority)
    assert held is not None and held.uid == "holder" and held.priority == 100
    snapshot = cluster()
    assert (GPU, "worker-1", "gpu-0") in headhold.elsewhere(snapshot, held, other, priority).held
    assert (GPU, "worker-1", "gpu-0") in headhold.elsewhere(snapshot, held, None, priority).held
    assert headhold.elsewhere(snapshot, held, holder, priority).held == snapshot.held
    urgent = _podgroup("urgent")
    assert headhold.elsewhere(snapshot, held, urgent, priority).held == snapshot.held, "a higher priority must not preempt for held room"
    assert headhold.note(other, held) == "1 device(s) held for ml/holder, the head of the line"
    assert "held for it as they free, since 2026-01-01T00:10:00Z" in (headhold.note(holder, held) or "")


def test_the_wait_counts_from_the_condition_turning_false_and_the_annotation_overrides_the_flag() -> None:
    assert headhold.waiting_since(_podgroup("a", since="2026-01-01T00:05:00Z")) == "2026-01-01T00:05:00Z"
    assert headhold.waiting_since(_podgroup("a")) == "2026-01-01T00:00:00Z"
    assert headhold.hold_after(_podgroup("a", annotations={keys.HOLD_AFTER: "2m"}), 300) == 120
    assert headhold.hold_after(_podgroup("a", annotations={keys.HOLD_AFTER: "soon"}), 300) == 300
    assert headhold.hold_after(_podgroup("a"), 300) == 300


def _nowhere(name: str):
    """A gang of 3 whose members ask for a node label no node has: it can never fit, even on an emptied cluster."""
    group, claims = gang(name, 3)
    return replace(group, members=tuple(replace(m, node_selector=frozen_map({"pool": "nowhere"})) for m in group.members)), claims


def _line(count: int) -> tuple[queue.Line, list[dict], Snapshot]:
    line, podgroups, claims = queue.Line(), [], []
    for i in range(count):
        group, made = _nowhere(f"g{i}")
        claims += made
        pod_group = _podgroup(f"g{i}", since="2026-01-01T00:00:00Z", annotations={keys.HOLD_AFTER: "10s"})
        pod_group["spec"]["disruptionMode"] = {"all": {}}
        podgroups.append(pod_group)
        line.join(pod_group, group, 0)
    return line, podgroups, with_claims(cluster(), claims)


def test_a_group_joins_the_line_once_a_cycle_and_the_next_cycle_finds_it_as_the_same_ahead() -> None:
    """A group met twice in a cycle (passed over, then asked for by the hold) is in the line once; the next cycle's
    join of the same group, as it was, finds the same `Ahead` (the head hold compares lines by them)."""
    line, podgroups, _ = _line(3)
    kept = list(line.ahead)
    line.join(podgroups[1], kept[1].group, 0)
    assert line.ahead == kept, "already in the line"
    line.clear()
    line.join(podgroups[2], kept[2].group, 0)
    assert line.ahead[0] is kept[2]


def test_gangs_that_can_never_fit_are_planned_for_a_hold_once_not_every_cycle(monkeypatch) -> None:
    """A line of gangs past their hold-after that no node can take: the first cycle plans each on the emptied cluster
    (to find the head), the next ones plan none until something they could use appears. Every plan of a thousand such
    gangs, each cycle, was most of the operator's CPU at rest."""
    plans: list[str] = []
    monkeypatch.setattr(headhold, "hold_for", lambda snapshot, group, *rest: plans.append(group.name) or hold_for(snapshot, group, *rest))
    line, podgroups, snapshot = _line(5)
    memo = shortfall.Shortfalls()
    memo.observe(shortfall.capacity(snapshot))
    hold = headhold.HeadHold(None, 300, memo)  # type: ignore[arg-type]  (no write: nobody is held for)

    async def taken() -> Snapshot:
        return snapshot

    async def cycles() -> list:
        return [await hold._desired(line.ahead, podgroups, taken, revision, DeviceMatcher()) for revision in range(3)]

    assert asyncio.run(cycles()) == [None, None, None]
    assert plans == [f"g{i}" for i in range(5)], "each planned once"
    relabelled = replace(snapshot, nodes=tuple(replace(n, labels=frozen_map({**n.labels, "zone": "b"})) for n in snapshot.nodes))
    memo.observe(shortfall.capacity(relabelled))
    snapshot = relabelled
    assert asyncio.run(cycles()) == [None, None, None]
    assert len(plans) == 10, "a node's labels changed: each planned again, once"


def test_a_gang_whose_own_verdict_found_no_node_is_never_planned_for_a_hold(monkeypatch) -> None:
    plans: list[str] = []
    monkeypatch.setattr(headhold, "hold_for", lambda snapshot, group, *rest: plans.append(group.name) or hold_for(snapshot, group, *rest))
    line, podgroups, snapshot = _line(3)
    memo = shortfall.Shortfalls()
    memo.observe(shortfall.capacity(snapshot))
    for ahead in line.ahead:
        memo.remember(ahead.memo, shortfall.group_key(ahead.group, snapshot, 0), shortfall.eligible(ahead.group, snapshot))
    hold = headhold.HeadHold(None, 300, memo)  # type: ignore[arg-type]

    async def taken() -> Snapshot:
        return snapshot

    assert asyncio.run(hold._desired(line.ahead, podgroups, taken, 0, DeviceMatcher())) is None
    assert plans == []


class _Writes:
    """The API calls a hold's update makes: status patches recorded (the first `refuse` of them answered 503), rule
    deletions recorded."""

    def __init__(self, refuse: int = 0) -> None:
        self.patched: list[tuple[str, dict]] = []
        self.deleted: list[str] = []
        self.refuse = refuse

    async def merge_patch(self, path: str, body: dict) -> dict:
        if self.refuse:
            self.refuse -= 1
            raise ApiError(503, "ServiceUnavailable", "etcd leader changed")
        self.patched.append((path, body))
        return {}

    async def delete(self, path: str) -> None:
        self.deleted.append(path)


def _held(device: tuple[str, str, str]) -> headhold.Held:
    return headhold.Held("holder", "ml", "holder", frozenset({device}), "2026-01-01T00:10:00Z", "2026-01-01T00:05:00Z", 0)


def _give_back(hold: headhold.HeadHold, podgroups: list[dict]) -> bool:
    async def unused() -> Snapshot:
        raise AssertionError("nobody waits: nothing is planned")

    return asyncio.run(hold.update([], podgroups, unused, 0, DeviceMatcher()))


def test_a_hold_given_back_without_device_taint_rules_wakes_the_groups_short() -> None:
    """1.34-1.36 without the gate: no rule is served, the hold lives in its record only. Given back (its holder left
    the line), the update says so, and the loop plans every group known short again."""
    device = (GPU, "worker-1", "gpu-0")
    kube = _Writes()
    hold = headhold.HeadHold(kube, 300)  # type: ignore[arg-type]
    hold.rules.served = False
    hold.current = _held(device)
    holder = _podgroup("holder", _held(device).record().wire())
    assert _give_back(hold, [holder]) is True
    assert kube.patched == [(kube.patched[0][0], {"status": {"hold": None}})] and hold.current is None
    assert _give_back(hold, [holder]) is False, "given back once: nothing more to give"


def test_a_hold_whose_record_was_not_cleared_gives_back_again_on_the_next_update() -> None:
    """The rules are deleted, then the write clearing `status.hold` is refused: the update fails, and the next one
    gives the devices back (and says so) although no rule covers them any more."""
    device = (GPU, "worker-1", "gpu-0")
    kube = _Writes(refuse=1)
    hold = headhold.HeadHold(kube, 300)  # type: ignore[arg-type]
    hold.rules.served = True
    hold.rules.covered[device] = "phalanx-head-gpu-0"
    hold.current = _held(device)
    holder = _podgroup("holder", _held(device).record().wire())
    with pytest.raises(ApiError):
        _give_back(hold, [holder])
    assert len(kube.deleted) == 1 and not hold.rules.covered, "the rule went before the refused write"
    assert _give_back(hold, [holder]) is True
    assert hold.current is None
