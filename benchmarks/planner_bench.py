"""Planner decision time for a 3-, a 64- and a 512-pod gang on 1,000 nodes x 8 fake GPUs (`--nodes` for more).

A standalone script, not a test: it times `plan()` and prints a table, with
no timed assertions (timings depend on the machine). It does check the
answers, and exits non-zero when a case does not decide as it must.

The cluster is dra-example-driver's shape, built by its stand-in
(`phalanx_dev.localcluster.fakegpu`): one pool per node named after it, devices
gpu-0..gpu-7 with index, uuid, model and driverVersion attributes and
memory/compute capacity, and the chart's `gpu.example.com` DeviceClass with
its CEL selector. The gang is a Job-like
group: 64 ranks, each with its own one-GPU claim and a 50m cpu request.

Cases:
  cold   a fresh DeviceMatcher per run: every CEL selector compiled and
         evaluated against every device it meets, from scratch;
  warm   one DeviceMatcher reused across runs, as the operator keeps one
         (one untimed run first fills its cache);
  small  the free cluster, a gang of 3 as the scale tier's burst submits;
         warm matcher. What every plan pays to look over every node.
  short  the same cluster with only 40 devices free (the rest held), so the
         64-pod gang cannot fit; warm matcher. Greedy places 40 members, then
         the aggregate count (24 devices short) proves that no arrangement
         fits, so the depth-first search is skipped.
  apart  the free cluster, every rank with required pod anti-affinity on the
         hostname against the gang's label, so one rank per node; warm
         matcher. The cost of the inter-pod rules (phalanx.planner.pods).
  large  the free cluster, a 512-rank gang (64 nodes' worth); warm matcher;
         target 100 ms.

Then the scheduling loop's cost per watch change with 40 such gangs waiting
on the short cluster, for a change that frees nothing (a bind): planning all
40 again, against the shortfall rule (phalanx.scheduling.shortfall: one
capacity summary of the snapshot, then one comparison per group).

Usage: python benchmarks/planner_bench.py [--runs N] [--nodes N]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from phalanx.planner import DeviceMatcher, Fits, Short, plan, quantity
from phalanx.planner.model import (
    Claim,
    Device,
    DeviceClass,
    DeviceRequest,
    Group,
    Member,
    Node,
    PodTerm,
    Requirement,
    Snapshot,
    frozen_map,
)
from phalanx.scheduling import shortfall
from phalanx_dev.localcluster import dradriver, fakegpu

NODES = 1_000
DEVICES_PER_NODE = 8
MEMBERS = 64
SMALL = 3
"""A gang of the burst (`scale.py`): its plan is mostly what it costs to look over every node."""
LARGE = 512
LARGE_TARGET_MS = 100.0
FREE_IN_SHORT_CASE = 40
CPU_MILLI = 50
TARGET_MS = 50.0
NAMESPACE = "bench"


def snapshot_node(name: str) -> Node:
    """A planner Node from the kwok Node object."""
    obj = fakegpu.node(name, fakegpu.NodeShape())
    allocatable = {k: quantity.amount(k, v) for k, v in obj["status"]["allocatable"].items()}
    return Node(name, labels=frozen_map(obj["metadata"]["labels"]), allocatable=frozen_map(allocatable), requested=frozen_map({"cpu": 0}))


def snapshot_devices(node_name: str) -> list[Device]:
    """The planner Devices of the stand-in ResourceSlice for one node."""
    spec = fakegpu.resource_slice(node_name, f"uid-{node_name}", DEVICES_PER_NODE)["spec"]
    return [
        Device(
            spec["driver"],
            spec["pool"]["name"],
            d["name"],
            node_name=spec["nodeName"],
            attributes=frozen_map({k: next(iter(v.values())) for k, v in d["attributes"].items()}),
            capacity=frozen_map({k: quantity.amount(k, v["value"]) for k, v in d["capacity"].items()}),
            generation=spec["pool"]["generation"],
        )
        for d in spec["devices"]
    ]


def device_class() -> DeviceClass:
    obj = dradriver.device_class()
    return DeviceClass(obj["metadata"]["name"], tuple(s["cel"]["expression"] for s in obj["spec"]["selectors"]))


def build(count: int = NODES) -> tuple[Snapshot, Snapshot, Group, Group]:
    """The cluster with every device free, the same cluster with only 40 free, the gang, and the large gang."""
    names = fakegpu.worker_names(count)
    nodes = tuple(snapshot_node(n) for n in names)
    devices = tuple(d for n in names for d in snapshot_devices(n))
    claims, members = {}, []
    for rank in range(max(MEMBERS, LARGE)):
        claim = Claim(NAMESPACE, f"train-{rank}-gpu", f"uid-claim-{rank}", (DeviceRequest("gpu", dradriver.DEVICE_CLASS),))
        claims[claim.key] = claim
        members.append(Member(NAMESPACE, f"train-{rank}", f"uid-pod-{rank}", requests=frozen_map({"cpu": CPU_MILLI}), claims=(claim.name,)))
    classes = frozen_map({dradriver.DEVICE_CLASS: device_class()})
    free = Snapshot(nodes, devices, classes, frozen_map(claims))
    # 40 free devices spread over 40 nodes (gpu-0 of every 25th node): fragmented, as a busy cluster is.
    keep = {(dradriver.DRIVER, names[i * count // FREE_IN_SHORT_CASE], "gpu-0") for i in range(FREE_IN_SHORT_CASE)}
    short = Snapshot(nodes, devices, classes, frozen_map(claims), frozenset(d.id for d in devices if d.id not in keep))
    return free, short, Group(NAMESPACE, "train", MEMBERS, tuple(members[:MEMBERS])), Group(NAMESPACE, "large", LARGE, tuple(members))


def apart(group: Group) -> Group:
    """The gang with one rank per node: labelled, and anti-affine on the hostname to that label."""
    label = {"gang": group.name}
    term = PodTerm("kubernetes.io/hostname", (Requirement("gang", "In", (group.name,)),), frozenset({group.namespace}))
    members = tuple(replace(m, labels=frozen_map(label), pod_anti_affinity=(term,)) for m in group.members)
    return replace(group, members=members)


def fits_apart(result: Fits | Short) -> str | None:
    wrong = fits_all(result)
    if wrong is None and len(result.nodes) != MEMBERS:
        return f"expected one rank per node, got {len(result.nodes)} nodes"
    return wrong


def measure(runs: int, decide: Callable[[], Fits | Short], check: Callable[[Fits | Short], str | None]) -> tuple[list[float], str | None]:
    """Milliseconds per run, and the first wrong answer (None if every answer was right)."""
    samples, wrong = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = decide()
        samples.append((time.perf_counter() - start) * 1000)
        wrong = wrong or check(result)
    return samples, wrong


def fits_all(result: Fits | Short, members: int = MEMBERS) -> str | None:
    if not isinstance(result, Fits):
        return f"expected Fits, got {result.message}"
    if len(result.placements) != members or len(result.claims) != members:
        return f"expected {members} placements and claims, got {len(result.placements)} and {len(result.claims)}"
    return None


def fits_large(result: Fits | Short) -> str | None:
    return fits_all(result, LARGE)


def is_short(result: Fits | Short) -> str | None:
    return None if isinstance(result, Short) else f"expected Short, got Fits with {len(result.placements)} placements"


def p90(samples: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def waiting(short: Snapshot, group: Group, warm: DeviceMatcher, runs: int, count: int = 40) -> tuple[float, float]:
    """Milliseconds per watch change with `count` short gangs waiting: (plan every one, the shortfall rule)."""
    groups = [replace(group, name=f"train-{i}") for i in range(count)]
    memo = shortfall.Shortfalls()
    memo.observe(shortfall.capacity(short))
    for i, g in enumerate(groups):
        memo.remember(str(i), shortfall.group_key(g, short, 0))
    bound = replace(short, held=short.held | {next(d.id for d in short.devices if d.id not in short.held)})
    start = time.perf_counter()
    for g in groups:
        plan(bound, g, warm)
    replanned = (time.perf_counter() - start) * 1000
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        memo.observe(shortfall.capacity(bound))
        skipped = all(memo.still_short(str(i), shortfall.group_key(g, bound, 0)) for i, g in enumerate(groups))
        samples.append((time.perf_counter() - start) * 1000)
        assert skipped, "a change that frees nothing must not wake a short group"
    return replanned, statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per case (default 30)")
    parser.add_argument("--nodes", type=int, default=NODES, help=f"nodes of {DEVICES_PER_NODE} devices (default {NODES:,})")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.nodes < FREE_IN_SHORT_CASE:
        parser.error(f"--nodes must be at least {FREE_IN_SHORT_CASE}, the short case's free devices")

    free, short, group, large = build(args.nodes)
    small = Group(NAMESPACE, "small", SMALL, group.members[:SMALL])
    print(
        f"nodes: {len(free.nodes):,}  devices: {len(free.devices):,} ({DEVICES_PER_NODE} per node)  "
        f"members: {len(group.members)} (min_count {group.min_count}, 1 GPU claim + {CPU_MILLI}m cpu each)"
    )
    print(f"short case: {len(short.devices) - len(short.held)} devices free, {len(short.held):,} held")
    print(f"runs per case: {args.runs}  (time.perf_counter around plan())")
    print()

    warm = DeviceMatcher()
    plan(free, group, warm)  # untimed: fills the warm matcher's cache, as the operator's first cycle does
    plan(short, group, warm)
    plan(free, large, warm)
    spread_out = apart(group)
    cases = [
        ("cold (fresh matcher)", *measure(args.runs, lambda: plan(free, group, DeviceMatcher()), fits_all)),
        ("warm (reused matcher)", *measure(args.runs, lambda: plan(free, group, warm), fits_all)),
        (f"small ({SMALL} ranks, warm)", *measure(args.runs, lambda: plan(free, small, warm), lambda r: fits_all(r, SMALL))),
        (f"short ({FREE_IN_SHORT_CASE} free, warm)", *measure(args.runs, lambda: plan(short, group, warm), is_short)),
        ("apart (anti-affinity)", *measure(args.runs, lambda: plan(free, spread_out, warm), fits_apart)),
        (f"large ({LARGE} ranks, warm)", *measure(args.runs, lambda: plan(free, large, warm), fits_large)),
    ]

    header = f"{'case':<24}{'median ms':>11}{'p90 ms':>10}{'min ms':>10}{'target ms':>11}{'median/target':>15}"
    print(header)
    print("-" * len(header))
    failures = []
    for name, samples, wrong in cases:
        median = statistics.median(samples)
        target = LARGE_TARGET_MS if name.startswith("large") else TARGET_MS
        print(f"{name:<24}{median:>11.1f}{p90(samples):>10.1f}{min(samples):>10.1f}{target:>11.0f}{median / target:>14.2f}x")
        if wrong:
            failures.append(f"{name}: {wrong}")
    print()
    replanned, ruled = waiting(short, group, warm, args.runs)
    print(
        f"40 short gangs waiting, one watch change that frees nothing: planning all {replanned:.0f} ms, "
        f"shortfall rule {ruled:.1f} ms (capacity summary of {len(short.nodes):,} nodes + 40 comparisons)"
    )
    print()
    last = plan(short, group, warm)
    if isinstance(last, Short):
        print(f"short case verdict: {last.message}")
    for failure in failures:
        print(f"WRONG ANSWER  {failure}", file=sys.stderr)
    if not failures:
        print(f"answers: cold and warm Fits with {MEMBERS} placements, short Short, apart one rank per node, large {LARGE}: as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
