"""Preemption planning time: 200 lower-priority candidates on 100 nodes x 8 GPUs.

A standalone script, not a test: it times `plan_preemption()` and counts the
`plan()` calls it makes, with no timed assertions (timings depend on the
machine). It checks the answers and exits non-zero when a case decides wrong.

Every GPU is held (by a victim, or by a pod that is no victim), so nothing
fits until some go. Victims have priorities 0..199 in a shuffled (seeded)
order over the nodes; the preemptor has priority 1000. Cases:

  groups    200 groups in disruptionMode all, 4 pods x 1 GPU each, spread over
            nodes; the preemptor is 32 ranks x 1 GPU: 8 groups must go.
  singles   200 single pods, 4 GPUs each (100 nodes x 8 GPUs); a 64-rank
            preemptor: 16 must go (a prefix found by doubling and bisection),
            15 removals tried.
  useless   1 GPU per node; the 150 cheapest candidates free only cpu, the 50
            others a GPU each, the other 50 GPUs are held by pods that are no
            victims; 8 ranks: the prefix is 158 long, and the reverse pass
            plans once per useless candidate in it.
  budgets   as groups, with every even-priority group protected by a PDB: the
            search runs over the 100 others first.
  hopeless  the preemptor wants more GPUs than the cluster has: decided by the
            pre-check with every candidate gone.
  fragment  cpu-bound, no devices: per 32-cpu node 2 candidates and 1 pod
            that is no victim, 8 cpu each; the preemptor is 16 ranks of 20 cpu,
            so a node serves a rank only once both its candidates go. Free cpu
            in aggregate suffices from the start, so every Short plan runs the
            depth-first search to its node budget.

Usage: python benchmarks/preemption_bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from phalanx.planner import DeviceMatcher, NoVictims, Preemption, placement, plan_preemption, preemption
from phalanx.planner.model import (
    Claim,
    Device,
    DeviceClass,
    DeviceRequest,
    Group,
    Member,
    Node,
    Pod,
    Snapshot,
    Victim,
    VictimPod,
    frozen_map,
)

NODES = 100
GPUS = 8
CANDIDATES = 200
GPU = "gpu.example.com"
NS = "bench"
PREEMPTOR = 1000


def cluster(cpu: int = 32_000, gpus: int = GPUS) -> tuple[list[Node], list[Device]]:
    nodes = [
        Node(
            f"node-{i:03}",
            labels=frozen_map({"kubernetes.io/hostname": f"node-{i:03}"}),
            allocatable=frozen_map({"cpu": cpu, "memory": 256 * 2**30, "pods": 110}),
        )
        for i in range(NODES)
    ]
    devices = [Device(GPU, n.name, f"gpu-{g}", node_name=n.name) for n in nodes for g in range(gpus)]
    return nodes, devices


def snapshot(nodes: list[Node], devices: list[Device], victims: list[Victim], group: Group, claims: list[Claim]) -> Snapshot:
    """The cluster with the victims running on it (requests, one pod each, devices held, pods listed)."""
    adds: dict[str, Counter] = {}
    for p in (p for v in victims for p in v.pods):
        adds.setdefault(p.node, Counter()).update({**p.requests, "pods": 1})
    nodes = [replace(n, requested=frozen_map(adds.get(n.name, {}))) for n in nodes]
    return Snapshot(
        tuple(nodes),
        tuple(devices),
        frozen_map({GPU: DeviceClass(GPU, (f"device.driver == '{GPU}'",))}),
        frozen_map({c.key: c for c in claims}),
        frozenset(d for v in victims for p in v.pods for d in p.devices),
        pods=tuple(Pod(p.namespace, p.name, p.node) for v in victims for p in v.pods),
    )


def preemptor(ranks: int, *, cpu: int = 50, gpu: bool = True) -> tuple[Group, list[Claim]]:
    claims = [Claim(NS, f"urgent-{r}-gpu", f"uid-c-{r}", (DeviceRequest("gpu", GPU),)) for r in range(ranks)] if gpu else []
    members = tuple(
        Member(NS, f"urgent-{r}", f"uid-urgent-{r}", requests=frozen_map({"cpu": cpu}), claims=(f"urgent-{r}-gpu",) if gpu else ())
        for r in range(ranks)
    )
    return Group(NS, "urgent", ranks, members), claims


def pod(name: str, node: str, gpus: list[int], cpu: int = 50) -> VictimPod:
    return VictimPod(NS, name, f"uid-{name}", node, frozen_map({"cpu": cpu}), tuple((GPU, node, f"gpu-{g}") for g in gpus))


def shuffled_priorities(seed: int) -> list[int]:
    priorities = list(range(CANDIDATES))
    random.Random(seed).shuffle(priorities)
    return priorities


def case_groups(budgets: bool = False) -> tuple[Snapshot, Group, list[Victim]]:
    """200 groups of 4 one-GPU pods; group i's pods sit on 4 different nodes."""
    nodes, devices = cluster()
    slots = [(n.name, g) for g in range(GPUS) for n in nodes]  # 800 GPU slots, node-major within each GPU index
    victims = []
    for i, priority in enumerate(shuffled_priorities(1)):
        pods = tuple(pod(f"g{i}-{r}", slots[4 * i + r][0], [slots[4 * i + r][1]]) for r in range(4))
        guarded = ((f"{NS}/guard-{i}", len(pods)),) if budgets and priority % 2 == 0 else ()
        victims.append(Victim(f"group {NS}/g{i}", priority, "2025-01-01T00:00:00Z", True, pods, guarded))
    group, claims = preemptor(32)
    return snapshot(nodes, devices, victims, group, claims), group, victims


def case_singles() -> tuple[Snapshot, Group, list[Victim]]:
    nodes, devices = cluster()
    victims = []
    for i, priority in enumerate(shuffled_priorities(2)):
        where = nodes[i // 2].name
        p = pod(f"s{i}", where, [4 * (i % 2) + g for g in range(4)])
        victims.append(Victim(f"pod {NS}/s{i}", priority, "2025-01-01T00:00:00Z", False, (p,)))
    group, claims = preemptor(64)
    return snapshot(nodes, devices, victims, group, claims), group, victims


def case_useless() -> tuple[Snapshot, Group, list[Victim]]:
    """Every GPU held by 100 pods that are not victims; 150 cpu-only victims; 50 one-GPU victims (which free a GPU)."""
    nodes, devices = cluster(gpus=1)
    victims = []
    for i in range(150):
        victims.append(Victim(f"pod {NS}/cpu{i}", i, "2025-01-01T00:00:00Z", False, (pod(f"cpu{i}", nodes[i % NODES].name, []),)))
    for i in range(50):
        victims.append(Victim(f"pod {NS}/gpu{i}", 150 + i, "2025-01-01T00:00:00Z", False, (pod(f"gpu{i}", nodes[2 * i].name, [0]),)))
    keepers = [Victim(f"pod {NS}/keep{i}", 10**6, "", False, (pod(f"keep{i}", nodes[2 * i + 1].name, [0]),)) for i in range(50)]
    group, claims = preemptor(8)
    return snapshot(nodes, devices, victims + keepers, group, claims), group, victims


def case_hopeless() -> tuple[Snapshot, Group, list[Victim]]:
    snap, _, victims = case_groups()
    group, claims = preemptor(NODES * GPUS + 1)
    return replace(snap, claims=frozen_map({c.key: c for c in claims})), group, victims


def case_fragment() -> tuple[Snapshot, Group, list[Victim]]:
    """Per 32-cpu node: 2 candidate pods and 1 keeper of 8 cpu each; a 20-cpu rank needs both candidates gone."""
    nodes, _ = cluster()
    victims = []
    for i, priority in enumerate(shuffled_priorities(3)):
        victims.append(Victim(f"pod {NS}/f{i}", priority, "2025-01-01T00:00:00Z", False, (pod(f"f{i}", nodes[i % NODES].name, [], 8000),)))
    keepers = [Victim(f"pod {NS}/k{i}", 10**6, "", False, (pod(f"k{i}", nodes[i].name, [], 8000),)) for i in range(NODES)]
    group, _ = preemptor(16, cpu=20_000, gpu=False)
    return snapshot(nodes, [], victims + keepers, group, []), group, victims


def counted(decide: Callable[[], Preemption | NoVictims]) -> tuple[Preemption | NoVictims, float, int]:
    """The answer, milliseconds, and how many times `plan()` ran."""
    calls = 0
    original = preemption.plan

    def counting(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    preemption.plan = counting
    try:
        start = time.perf_counter()
        result = decide()
        return result, (time.perf_counter() - start) * 1000, calls
    finally:
        preemption.plan = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per case (default 5)")
    args = parser.parse_args(argv)

    expectations: dict[str, Callable[[Preemption | NoVictims], str | None]] = {
        "groups": lambda r: None if isinstance(r, Preemption) and len(r.victims) == 8 else f"expected 8 groups, got {r}",
        "singles": lambda r: None if isinstance(r, Preemption) and len(r.victims) == 16 else "expected 16 pods",
        "useless": lambda r: (
            None
            if isinstance(r, Preemption) and [v.key for v in r.victims] == [f"pod {NS}/gpu{i}" for i in range(8)]
            else "expected gpu0..7"
        ),
        "budgets": lambda r: (
            None if isinstance(r, Preemption) and len(r.victims) == 8 and not any(v.budgets for v in r.victims) else "expected 8"
        ),
        "hopeless": lambda r: None if isinstance(r, NoVictims) else "expected NoVictims",
        "fragment": lambda r: None if isinstance(r, Preemption) else f"expected a Preemption, got {r}",
    }
    builders = {
        "groups": case_groups,
        "singles": case_singles,
        "useless": case_useless,
        "budgets": lambda: case_groups(budgets=True),
        "hopeless": case_hopeless,
        "fragment": case_fragment,
    }
    print(f"nodes: {NODES}  candidates: {CANDIDATES}  runs per case: {args.runs}")
    print(f"plan() node budget: {placement.DEFAULT_BUDGET:,} visits; warm DeviceMatcher per case (one untimed run first)")
    print()
    header = f"{'case':<10}{'victims':>9}{'plan calls':>12}{'median ms':>11}{'min ms':>9}{'ms/plan':>9}"
    print(header)
    print("-" * len(header))
    failures = []
    for name, build in builders.items():
        snap, group, victims = build()
        matcher = DeviceMatcher()
        plan_preemption(snap, group, victims, PREEMPTOR, matcher)
        samples, calls, result = [], 0, None
        for _ in range(args.runs):
            result, ms, calls = counted(
                lambda snap=snap, group=group, victims=victims, matcher=matcher: plan_preemption(snap, group, victims, PREEMPTOR, matcher)
            )
            samples.append(ms)
        chosen = len(result.victims) if isinstance(result, Preemption) else "-"
        median = statistics.median(samples)
        print(f"{name:<10}{chosen!s:>9}{calls:>12}{median:>11.1f}{min(samples):>9.1f}{median / calls:>9.2f}")
        wrong = expectations[name](result)
        if wrong:
            failures.append(f"{name}: {wrong}")
    for failure in failures:
        print(f"WRONG ANSWER  {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
