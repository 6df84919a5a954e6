"""The queue's own cost per scheduling cycle with 1,000 waiting groups (`./task bench -- --workloads queue`).

In process, no API server: what the loop does each cycle for the queue, on the planner's snapshot of a full cluster
(125 nodes x 8 devices, every device held) with 1,000 waiting 4-rank gangs of three priorities:

  order      sort the groups by the queue's key (priority, then age, then name);
  line       per group, the shortfall memo's check (each is known short, as on a cycle where nothing was freed) and
             its place in the line (`queue.Line.join`);
  held back  one plan behind all of them that fits (a 1-rank basic group, once a device frees): is it held back for a
             group ahead? Every group ahead known short is passed over on its memo;
  hold       the head of the line's hold: planned on the first cycle (`planner.queue.hold_for`, printed apart), then
             one comparison of what it read (the loop plans it again only when the snapshot or the head changes);
  positions  where every waiting group stands (explain's and the held-back message's `position N of M`).

Also printed, for scale: the first cycle after capacity was freed, where every group is planned again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from phalanx.planner import DeviceMatcher, Fits, plan
from phalanx.planner.model import Claim, DeviceRequest, Group, Member, Snapshot, frozen_map
from phalanx.planner.queue import hold_for, takes_room
from phalanx.scheduling import queue, shortfall

GROUPS = 1_000
NODES = 125
RANKS = 4
NAMESPACE = "bench"


def _world(groups: int = GROUPS, nodes: int = NODES) -> tuple[Snapshot, list[dict], list[Group], dict[str, int]]:
    from planner_bench import device_class, snapshot_devices, snapshot_node

    from phalanx_dev.localcluster import dradriver, fakegpu

    names = fakegpu.worker_names(nodes)
    devices = tuple(d for n in names for d in snapshot_devices(n))
    claims, podgroups, made, priority = {}, [], [], {}
    for g in range(groups):
        members = []
        for rank in range(RANKS):
            claim = Claim(NAMESPACE, f"g{g}-{rank}-gpu", f"uid-claim-{g}-{rank}", (DeviceRequest("gpu", dradriver.DEVICE_CLASS),))
            claims[claim.key] = claim
            members.append(Member(NAMESPACE, f"g{g}-{rank}", f"uid-{g}-{rank}", requests=frozen_map({"cpu": 50}), claims=(claim.name,)))
        uid = f"uid-g{g}"
        podgroups.append(
            {
                "metadata": {
                    "namespace": NAMESPACE,
                    "name": f"g{g}",
                    "uid": uid,
                    "creationTimestamp": f"2026-12-01T00:{g // 60 % 60:02d}:{g % 60:02d}Z",
                },
                "spec": {"schedulingPolicy": {"gang": {"minCount": RANKS}}, "disruptionMode": {"all": {}}},
                "status": {},
            }
        )
        made.append(Group(NAMESPACE, f"g{g}", RANKS, tuple(members)))
        priority[uid] = (0, 100, 10000)[g % 3]
    classes = frozen_map({dradriver.DEVICE_CLASS: device_class()})
    full = Snapshot(tuple(snapshot_node(n) for n in names), devices, classes, frozen_map(claims), frozenset(d.id for d in devices))
    return full, podgroups, made, priority


def measure(runs: int = 20, gangs: int = GROUPS, nodes: int = NODES) -> dict[str, float]:
    """Median CPU milliseconds (this process; the machine may be busy) of each part of one cycle's queue work, and of the
    first cycle that plans every group; `gangs` and `nodes` smaller than the published run's only to keep the code
    run (the test suite's smallest size)."""
    full, podgroups, groups, priority = _world(gangs, nodes)
    matcher = DeviceMatcher()
    by_uid = {pg["metadata"]["uid"]: g for pg, g in zip(podgroups, groups, strict=True)}
    memo = shortfall.Shortfalls()
    memo.observe(shortfall.capacity(full))
    started = time.process_time()
    for pg in podgroups:
        uid = pg["metadata"]["uid"]
        assert not isinstance(plan(full, by_uid[uid], matcher), Fits)
        memo.remember(uid, shortfall.group_key(by_uid[uid], full, priority[uid]))
    first_cycle = (time.process_time() - started) * 1000
    freed = replace(full, held=full.held - {full.devices[0].id})
    member = Member(NAMESPACE, "small-0", "uid-small", requests=frozen_map({"cpu": 50}), claims=("small-gpu",))
    small_claim = Claim(NAMESPACE, "small-gpu", "uid-small-gpu", (DeviceRequest("gpu", next(iter(full.classes))),))
    freed = replace(freed, claims=frozen_map({**freed.claims, small_claim.key: small_claim}))
    small = plan(freed, Group(NAMESPACE, "small", 1, (member,)), matcher)
    assert isinstance(small, Fits)
    parts: dict[str, list[float]] = {k: [] for k in ("order", "line", "held back", "hold", "positions")}
    pods_of = {pg["metadata"]["uid"]: [] for pg in podgroups}
    hold_ms = 0.0
    cached: tuple[tuple[object, ...], frozenset[object]] | None = None
    for _ in range(runs):
        t0 = time.process_time()
        ordered = sorted(podgroups, key=lambda pg: queue.order(pg, priority[pg["metadata"]["uid"]]))
        t1 = time.process_time()
        line = queue.Line()
        for pg in ordered:
            uid = pg["metadata"]["uid"]
            group = by_uid[uid]
            assert memo.still_short(uid, shortfall.group_key(group, full, priority[uid]))
            line.join(pg, group, priority[uid])
        t2 = time.process_time()
        for ahead in line.ahead:  # as the loop's _held_back: each known short is passed over
            if not memo.still_short(ahead.memo, shortfall.group_key(ahead.group, freed, ahead.priority)) and takes_room(
                freed, ahead.group, small, matcher
            ):
                break
        t3 = time.process_time()
        head = line.ahead[0]
        key = (head.pod_group["metadata"]["uid"], 1, head.group, frozenset())
        if cached is None or cached[0] != key:  # as the loop's HeadHold: planned again only when what it read changed
            found = hold_for(replace(full, held=frozenset()), head.group, matcher=matcher)
            assert found is not None and len(found) == RANKS
            cached = (key, found)
            hold_ms = (time.process_time() - t3) * 1000
        t4 = time.process_time()
        queue.positions(podgroups, pods_of, lambda pg: priority[pg["metadata"]["uid"]])
        t5 = time.process_time()
        for key, (a, b) in zip(parts, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)), strict=True):
            parts[key].append((b - a) * 1000)
    out = {k: statistics.median(v) for k, v in parts.items()}
    out["hold"] = statistics.median(parts["hold"][1:]) if runs > 1 else 0.0
    out["hold planned (first cycle)"] = hold_ms
    out["cycle"] = sum(v for k, v in out.items() if k in parts)
    out["first cycle, every group planned"] = first_cycle
    return out


def table(result: dict[str, float]) -> list[str]:
    keys = ("order", "line", "held back", "hold", "positions", "cycle")
    return [
        "",
        f"queue: cost per cycle with {GROUPS:,} waiting {RANKS}-rank gangs on {NODES} nodes x 8 devices, all held "
        f"(in process, median CPU ms; hold planned on its first cycle: {result['hold planned (first cycle)']:.1f} ms; "
        f"the first cycle after capacity is freed, every group planned again: {result['first cycle, every group planned']:.0f} ms)",
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
        "| " + " | ".join(f"{result[k]:.1f}" for k in keys) + " |",
    ]
