"""The three-way bench's scale tier (`./task bench -- --scale 1000`): the sizes upstream measures its gangs at.

Not in the default run: on a 2-core machine a 1,000-node tier takes the
better part of an hour. The same two local control planes as the default
tier (Phalanx; the in-tree feature, which also runs vanilla), each grown to
NODES kwok workers x 8 devices from the `fakegpu` stand-in (the clusters start
small; the bench adds the rest, 16 at a time, each with its slice), each
cluster's kwok controller at nice -5 (`prioritise_nodes`) renewing 32 node
Leases at once (`NODE_LEASE_PARALLELISM`). Each way's latency and burst runs
are measured alone: the other cluster (and the operator on it) is stopped for
the run and continued after (`alone`). Then, in this order:

  latency   one gang of 32, 512 and 2,048 ranks, creation to every member
            bound, three ways (`three_way.latency_run`), interleaved;
  burst     1,000 gangs of 3 submitted at once, room for all: gangs admitted
            per second three ways; for Phalanx also the mean time of one
            PodGroup attempt (`phalanx_podgroup_scheduling_attempt_duration_seconds`
            and the planner's part of it), beside upstream's published
            3.7-5.7 ms per attempt (scheduler_perf gangscheduling, 5,000 nodes);
  waiting   Phalanx with 1 and then 1,000 gangs of 3 that cannot be placed (a
            nodeSelector no node has): the operator's CPU for one change (a
            pod bound directly and started by kwok, K of them one second
            apart), and for one pod deleted (capacity freed: every waiting
            group may use it, so it is planned again). Each window runs from
            the first change until the loop is still (no cycle a change woke
            for 10 s), so what a change sets off is counted however long it
            trails; idle CPU is measured over 24 s once the loop is still,
            before each, and subtracted at its rate. The cycles each change
            woke are printed beside its cost;
  footprint the operator's RSS and CPU with 10,000, 50,000 and 100,000 pods
            (bound directly to the workers, no claims; kwok runs them): idle
            RSS and CPU once each level has settled, and the time to create it.
            A level that cannot be reached within --scale-budget seconds of
            creation is cut short: the bench prints what it reached.

After each workload the bench notes the load average and the Lease terms the
operator lost so far (its log's "stopped leading" lines, which every version
of the operator writes, and `phalanx_leader_terms_lost_total`).

Prints the tables, and writes everything as JSON under benchmarks/results/.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apirequests
import components
import three_way as tw
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

from phalanx.api import keys
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc
from phalanx_dev.localcluster.fakegpu import NodeShape, create_once, node, resource_slice

UPSTREAM_ATTEMPT_MS = (3.7, 5.7)
"""kube-scheduler's scheduler_perf gangscheduling: 1,000-3,000 gangs of 3 on 5,000 nodes, ms per PodGroup attempt."""
START_WORKERS = 8
CREATORS = 48
"""Footprint pods created at once: the API server, not the bench, should be what limits the rate."""
WAIT_SELECTOR = {"bench.phalanx.dev/pool": "nowhere"}
STILL = 10.0
"""Seconds with no cycle a change woke (and none a timer woke beyond the period's) after which the loop is taken as
still: what a change set off has run its course."""
PERIOD = 5.0
"""The operator's scheduling period (`SchedulingLoop.period`): a still loop still cycles this often."""
IDLE_SPAN = 24.0
"""Seconds of each idle window the waiting figures subtract, at its rate, from the changes' windows."""


@dataclass(frozen=True)
class ScalePlan:
    nodes: int
    sizes: list[int] = field(default_factory=lambda: [32, 512, 2048])
    runs: int = 1
    burst: int = 1000
    waiting: int = 1000
    changes: int = 20
    levels: list[int] = field(default_factory=lambda: [10_000, 50_000, 100_000])
    budget: float = 1800.0
    workloads: tuple[str, ...] = ("latency", "burst", "waiting", "footprint")


def say(message: str) -> None:
    print(f"bench scale: {message}", file=sys.stderr, flush=True)


async def grow(cluster: LocalCluster, nodes: int, gpus: int) -> float:
    """Workers START_WORKERS+1..nodes, each with its slice; seconds it took."""
    started = time.monotonic()
    async with await cluster.api_client() as api:
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        names = iter(f"worker-{i}" for i in range(START_WORKERS + 1, nodes + 1))
        shape = NodeShape()

        async def adder() -> None:
            for name in names:
                body = node(name, shape)
                created = await create_once(core.create_node, body) or await core.read_node(name)
                await core.patch_node_status(name, {"status": body["status"]})
                await create_once(resource.create_resource_slice, resource_slice(name, created.metadata.uid, gpus))

        await asyncio.gather(*(adder() for _ in range(16)))
        # Ready, and untainted by the node lifecycle controller (its not-ready taints go up to a monitor period later):
        # every taint removed is capacity freed, on which the operator plans every waiting gang again
        while True:
            listed = await core.list_node(label_selector="type=kwok")
            ready = sum(1 for n in listed.items if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))
            tainted = sum(1 for n in listed.items if any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or []))
            if ready >= nodes and not tainted:
                break
            await asyncio.sleep(2)
    return time.monotonic() - started


def scrape(operator: operatorproc.OperatorProcess) -> dict[str, float]:
    """The operator's samples, `name{k="v",...}` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k != "le")
            if not s.name.endswith("_bucket"):
                out[f"{s.name}{{{labels}}}"] = s.value
    return out


def leases(operator: operatorproc.OperatorProcess, workload: str, since: float) -> dict[str, Any]:
    """Lease terms the operator lost since it started, and the load average, as `workload` ends."""
    try:
        metric: float | None = _sum(scrape(operator), "phalanx_leader_terms_lost_total")
    except OSError:
        metric = None
    stopped = operator.logs().count("stopped leading")
    return {
        "workload": workload,
        "minutes": (time.monotonic() - since) / 60,
        "stopped_leading": stopped,
        "terms_lost": metric,
        "load": _load(),
    }


def _sum(samples: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in samples.items() if k.startswith(prefix + "{"))


async def burst_run(way: tw.Way, gangs: int, timeout: float, kept: dict[str, Any]) -> None:
    """`gangs` gangs of 3 submitted at once, room for all: when each had its 3 members bound, kept under the way's
    name before the gangs are drained (a run stopped while they drain keeps its figures)."""
    names = [f"burst-{i:04d}" for i in range(gangs)]
    before = scrape(way.operator) if way.operator else {}
    operator_pid = way.operator.process.pid if way.operator else None
    cpu_before = components.cpu(operator_pid)
    asked_before = apirequests.count(way.cluster)
    started = time.monotonic()
    sem = asyncio.Semaphore(32)

    async def submit(name: str) -> None:
        async with sem:
            await way.submit(name, 3)

    await asyncio.gather(*(submit(n) for n in names))
    submitted = time.monotonic() - started
    admitted: dict[str, float] = {}

    def done() -> bool:
        counts: dict[str, int] = {}
        for pod in way.pods.store.values():
            gang = (pod["metadata"].get("labels") or {}).get("bench-gang")
            if gang and pod["spec"].get("nodeName"):
                counts[gang] = counts.get(gang, 0) + 1
        now = time.monotonic()
        for gang, bound in counts.items():
            if bound >= 3:
                admitted.setdefault(gang, now - started)
        return len(admitted) >= gangs

    await way.pods.until(done, timeout)
    cpu_spent = components.spent(cpu_before, components.cpu(operator_pid))
    asked = apirequests.spent(asked_before, apirequests.count(way.cluster))
    out: dict[str, Any] = {
        "gangs": gangs,
        "admitted": len(admitted),
        "submit_seconds": submitted,
        "seconds": max(admitted.values()) if len(admitted) == gangs else timeout,
    }
    out["gangs_per_second"] = len(admitted) / out["seconds"] if out["seconds"] else 0.0
    if way.operator:
        after = scrape(way.operator)
        attempt = "phalanx_podgroup_scheduling_attempt_duration_seconds"
        algo = "phalanx_podgroup_scheduling_algorithm_duration_seconds"
        count = _sum(after, attempt + "_count") - _sum(before, attempt + "_count")
        if count:
            out["attempts"] = count
            out["attempt_ms"] = 1000 * (_sum(after, attempt + "_sum") - _sum(before, attempt + "_sum")) / count
            out["algorithm_ms"] = (
                1000
                * (_sum(after, algo + "_sum") - _sum(before, algo + "_sum"))
                / max(1, _sum(after, algo + "_count") - _sum(before, algo + "_count"))
            )
    # every process's CPU over the burst, the other cluster idling beside it included (benchmarks/components.py)
    out["cpu_seconds"] = cpu_spent
    # what its API server was asked over the burst, by verb and resource (benchmarks/apirequests.py)
    out["requests"] = asked
    kept[way.name] = {**out, "load": _load()}
    say(f"burst {way.name}: {out}")
    await asyncio.gather(*(way.finish(n) for n in names))
    await way.drained(timeout=900)


def _cpu(pid: int) -> float:
    return tw._proc_stat(pid)[1]


async def change_cost(way: tw.Way, waiting: int, changes: int, workers: list[str]) -> dict[str, Any]:
    """Phalanx with `waiting` gangs of 3 that no node can take: CPU seconds of the operator per change."""
    assert way.operator is not None
    pid = way.operator.process.pid
    core = client.CoreV1Api(way.api)
    custom = client.CustomObjectsApi(way.api)
    names = [f"wait-{i:04d}" for i in range(waiting)]
    sem = asyncio.Semaphore(32)

    async def submit(name: str) -> None:
        body = tw.job(name, 3, "phalanx")
        body["spec"]["template"]["spec"]["nodeSelector"] = WAIT_SELECTOR
        # past its hold-after by the time it is measured, as a gang waiting longer than the default 5 minutes is: the
        # head of the line's hold is looked for among all of them every cycle
        body["metadata"].setdefault("annotations", {})[keys.HOLD_AFTER] = "10s"
        async with sem:
            await way.batch.create_namespaced_job(tw.NAMESPACE, body)

    await asyncio.gather(*(submit(n) for n in names))

    async def unschedulable() -> int:
        listed = await custom.list_namespaced_custom_object("scheduling.phalanx.dev", "v1beta1", tw.NAMESPACE, "podgroups")
        return sum(
            1
            for g in listed["items"]
            if any(
                c.get("type") == "PodGroupInitiallyScheduled" and c.get("reason") == "Unschedulable"
                for c in (g.get("status") or {}).get("conditions") or []
            )
        )

    async def pointed() -> int:
        """Gated members whose WaitingForGang Event is written (PER_CYCLE a cycle: work owed for new gangs, not a
        change's cost)."""
        listed = await core.list_namespaced_event(tw.NAMESPACE, field_selector="reason=WaitingForGang")
        return len(listed.items)

    deadline = time.monotonic() + 900
    while (seen := await unschedulable()) < waiting and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the API)
        await asyncio.sleep(2)
    while await pointed() < 3 * waiting and time.monotonic() < deadline:  # noqa: ASYNC110 (polls the API)
        await asyncio.sleep(2)

    def counters() -> tuple[float, dict[str, float], dict[str, float]]:
        """(the operator's CPU seconds, its cycles by what woke them, the watch changes it kept by resource)."""
        samples = scrape(way.operator)

        def by(name: str, label: str) -> dict[str, float]:
            return {k.split(f'{label}="', 1)[1].rstrip('"}'): v for k, v in samples.items() if k.startswith(name + "{")}

        return _cpu(pid), by("phalanx_scheduling_cycles_total", "woken_by"), by("phalanx_watch_changes_total", "resource")

    def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}

    async def phase(act: Callable[[int], Awaitable[Any]] | None) -> dict[str, Any]:
        """CPU, cycles and changes from the first act until the loop is `still` (what the changes set off is in it,
        however long it trails), or over an idle span when there is no act."""
        cpu0, cycles0, changes0 = counters()
        started = time.monotonic()
        if act is None:
            await asyncio.sleep(IDLE_SPAN)
        else:
            for i in range(changes):
                await act(i)
                await asyncio.sleep(1.0)
            await still()
        cpu1, cycles1, changes1 = counters()
        return {
            "seconds": time.monotonic() - started,
            "cpu": cpu1 - cpu0,
            "cycles": moved(cycles0, cycles1),
            "changes": moved(changes0, changes1),
        }

    async def still() -> None:
        """Until STILL seconds pass with no cycle a change woke, and no more woken by a timer than the period's."""
        deadline = time.monotonic() + 300
        since, at = time.monotonic(), counters()[1]
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            woke = moved(at, counters()[1])
            if woke.get("change") or woke.get("timer", 0) > STILL / PERIOD + 1:
                since, at = time.monotonic(), counters()[1]
            elif time.monotonic() - since >= STILL:
                return
        say(f"waiting: the loop was never still for {STILL} s in 300 s; measuring anyway")

    await still()
    idle = await phase(None)

    async def add(i: int) -> None:
        await core.create_namespaced_pod("ballast", tw.bound_pod(f"change-{i}", workers[i % len(workers)], {"app": "change"}))

    async def delete(i: int) -> None:
        await core.delete_namespaced_pod(f"change-{i}", "ballast", grace_period_seconds=0)

    added = await phase(add)
    await still()
    idle2 = await phase(None)
    deleted = await phase(delete)
    idle_rate = (idle["cpu"] + idle2["cpu"]) / (2 * IDLE_SPAN)

    def per_change(measured: dict[str, Any]) -> float:
        return 1000 * max(0.0, measured["cpu"] - idle_rate * measured["seconds"]) / changes

    out = {
        "waiting": waiting,
        "unschedulable_seen": seen,
        "idle_cpu_percent": 100 * idle_rate,
        "cpu_per_pod_added_ms": per_change(added),
        "cpu_per_pod_deleted_ms": per_change(deleted),
        "cycles_per_pod_added": added["cycles"].get("change", 0.0) / changes,
        "cycles_per_pod_deleted": deleted["cycles"].get("change", 0.0) / changes,
        "phases": {"idle": idle, "added": added, "idle2": idle2, "deleted": deleted},
    }
    say(f"waiting {waiting}: {out}")
    return out


async def finish_waiting(way: tw.Way, waiting: int) -> None:
    """The waiting gangs deleted and gone (after their figures are recorded: a run stopped while draining keeps them)."""
    await asyncio.gather(*(way.finish(f"wait-{i:04d}") for i in range(waiting)))
    await way.drained(timeout=900)


async def footprint_levels(
    way: tw.Way, levels: list[int], budget: float, workers: list[str], out: list[dict[str, Any]], idle: float = 20.0
) -> None:
    """The operator's RSS and CPU at each level of pods, bound directly to the workers, created CREATORS at a time;
    each level's row appended to `out` as it is measured (a run stopped midway keeps the levels it reached)."""
    assert way.operator is not None
    pid = way.operator.process.pid
    core = client.CoreV1Api(way.api)
    rss, c0 = tw._proc_stat(pid)
    await asyncio.sleep(idle)
    rss, c1 = tw._proc_stat(pid)
    out.append(
        {"pods": 0, "target": 0, "create_seconds": 0.0, "cpu_while_creating_percent": 0.0, "rss_mib": rss}
        | {"rss_settling_mib": rss, "cpu_idle_percent": 100 * (c1 - c0) / idle, "hwm_mib": _hwm(pid)}
    )
    have = 0
    spent = 0.0
    for level in levels:
        started = time.monotonic()
        cpu0 = _cpu(pid)
        created = await create_ballast(core, range(have, level), workers, started + budget - spent)
        creating = time.monotonic() - started
        spent += creating
        cpu_creating = _cpu(pid) - cpu0
        reached = have = have + created
        await asyncio.sleep(idle)
        rss0, c0 = tw._proc_stat(pid)
        await asyncio.sleep(idle)
        rss1, c1 = tw._proc_stat(pid)
        row = {
            "pods": reached,
            "target": level,
            "create_seconds": creating,
            "cpu_while_creating_percent": 100 * cpu_creating / creating if creating else 0.0,
            "rss_mib": rss1,
            "rss_settling_mib": rss0,
            "cpu_idle_percent": 100 * (c1 - c0) / idle,
            "hwm_mib": _hwm(pid),
        }
        out.append(row)
        say(f"footprint: {row}")
        if reached < level:
            say(f"footprint: {level:,} pods not reached within the {budget:.0f} s budget; stopped at {reached:,}")
            break


async def create_ballast(core: client.CoreV1Api, indices: range, workers: list[str], until: float) -> int:
    """Pods `ballast-I` bound directly to the workers, CREATORS at a time, until `until` (monotonic); how many were created."""
    queue = iter(indices)
    created = 0

    async def creator() -> None:
        nonlocal created
        for i in queue:
            if time.monotonic() > until:
                return
            body = tw.bound_pod(f"ballast-{i}", workers[i % len(workers)], {"app": "ballast", "shard": f"s{i % 20}"})
            await core.create_namespaced_pod("ballast", body)
            created += 1

    await asyncio.gather(*(creator() for _ in range(CREATORS)))
    return created


def _hwm(pid: int) -> float:
    return next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM:")) / 1024


async def measure(
    plan: ScalePlan, phalanx: LocalCluster, upstream: LocalCluster, operator: operatorproc.OperatorProcess, out: dict[str, Any]
) -> None:
    p = await tw._open("phalanx", phalanx, operator)
    opened = [p]
    ways = {"phalanx": p}
    if upstream is not None:
        tree = await tw._open("in-tree", upstream, None)
        opened.append(tree)
        ways |= {"vanilla": tw.Way("vanilla", upstream, tree.api, tree.pods), "in-tree": tree}
    workers = [f"worker-{i}" for i in range(1, plan.nodes + 1)]
    since = time.monotonic()

    def noted(workload: str) -> None:
        out["leases"].append(leases(operator, workload, since))
        say(f"after {workload}: {out['leases'][-1]}")

    try:
        if "latency" in plan.workloads:
            for size in plan.sizes:
                samples: dict[str, list[dict[str, float | None]]] = {w: [] for w in tw.WAYS}
                out["latency"][size] = samples
                for run in range(plan.runs):
                    for w in tw.WAYS:
                        async with alone(ways[w], ways.values()):
                            sample = await tw.latency_run(ways[w], size, timeout=max(300.0, size * 0.8))
                        samples[w].append({**sample, "load": _load()})
                        say(f"latency {size} ranks run {run + 1} {w}: {sample}")
                noted(f"latency {size}")
        if "burst" in plan.workloads:
            for w in tw.WAYS:
                async with alone(ways[w], ways.values()):
                    await burst_run(ways[w], plan.burst, timeout=1200, kept=out["burst"])
            noted("burst")
        with contextlib.suppress(client.ApiException):
            await client.CoreV1Api(p.api).create_namespace({"metadata": {"name": "ballast"}})
        if "waiting" in plan.workloads:
            for waiting in (1, plan.waiting):
                out["waiting"].append({**await change_cost(p, waiting, plan.changes, workers), "load": _load()})
                noted(f"waiting {waiting}")
                await finish_waiting(p, waiting)
        if "footprint" in plan.workloads:
            await footprint_levels(p, plan.levels, plan.budget, workers, out["footprint"])
            noted("footprint")
    finally:
        for w in opened:
            await w.pods.stop()
            await w.api.close()


def tables(plan: ScalePlan, raw: dict[str, Any]) -> str:
    lines = []
    if raw["latency"]:
        lines += [
            f"scale {plan.nodes:,} nodes x 8 devices: one gang, 1 device per rank, creation to all bound, median of {plan.runs}, seconds",
            "| ranks | vanilla | in-tree | Phalanx | Phalanx / vanilla | Phalanx / in-tree | load average (Phalanx's run) |",
            "|---|---|---|---|---|---|---|",
        ]
        for size, samples in raw["latency"].items():
            if any(not samples[w] for w in tw.WAYS):
                continue
            v, t, p = (tw._median(samples[w], "create_to_bound") for w in ("vanilla", "in-tree", "phalanx"))
            load = samples["phalanx"][-1].get("load", "-")
            lines.append(f"| {size} | {tw._fmt(v)} | {tw._fmt(t)} | {tw._fmt(p)} | {tw._ratio(p, v)} | {tw._ratio(p, t)} | {load} |")
    if raw["burst"]:
        lines += [
            "",
            f"burst: {plan.burst:,} gangs of 3 submitted at once, room for all",
            "| scheduler | admitted | seconds | gangs/s | per attempt | of it, the planner |",
            "|---|---|---|---|---|---|",
        ]
        for w in tw.WAYS:
            b = raw["burst"].get(w)
            if b:
                per = f"{b['attempt_ms']:.1f} ms" if "attempt_ms" in b else "-"
                algo = f"{b['algorithm_ms']:.1f} ms" if "algorithm_ms" in b else "-"
                lines.append(f"| {w} | {b['admitted']}/{b['gangs']} | {b['seconds']:.1f} | {b['gangs_per_second']:.1f} | {per} | {algo} |")
        rate = {w: raw["burst"][w]["gangs_per_second"] for w in tw.WAYS if w in raw["burst"]}
        if len(rate) == 3:
            lines.append(
                f"gangs/s ratios: Phalanx / vanilla {tw._ratio(rate['phalanx'], rate['vanilla'])}, "
                f"Phalanx / in-tree {tw._ratio(rate['phalanx'], rate['in-tree'])}; upstream publishes "
                f"{UPSTREAM_ATTEMPT_MS[0]}-{UPSTREAM_ATTEMPT_MS[1]} ms per PodGroup attempt (scheduler_perf, 5,000 nodes)"
            )
    if raw["waiting"]:
        lines += [
            "",
            f"waiting gangs (Phalanx): operator CPU per change, mean of {plan.changes}, until the loop is still, idle CPU subtracted",
            "| gangs waiting | of them seen Unschedulable | idle CPU | per pod added (bound, started) | cycles | "
            "per pod deleted (capacity freed) | cycles | load average |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in raw["waiting"]:
            cycles = [f"{row[k]:.1f}" if k in row else "-" for k in ("cycles_per_pod_added", "cycles_per_pod_deleted")]
            lines.append(
                f"| {row['waiting']:,} | {row['unschedulable_seen']:,} | {row['idle_cpu_percent']:.1f}% | {row['cpu_per_pod_added_ms']:.0f} ms "
                f"| {cycles[0]} | {row['cpu_per_pod_deleted_ms']:.0f} ms | {cycles[1]} | {row.get('load', '-')} |"
            )
        if len(raw["waiting"]) == 2:
            one, many = raw["waiting"]
            lines.append(
                f"ratio {many['waiting']:,} / 1: pod added {tw._ratio(many['cpu_per_pod_added_ms'], one['cpu_per_pod_added_ms'])}, "
                f"pod deleted {tw._ratio(many['cpu_per_pod_deleted_ms'], one['cpu_per_pod_deleted_ms'])} (target: within 2x)"
            )
    if raw.get("footprint"):
        lines += [
            "",
            "operator footprint (pods bound directly, no claims; RSS and CPU once settled)",
            "| pods | RSS | peak RSS | CPU idle | CPU while creating | create time |",
            "|---|---|---|---|---|---|",
        ]
        for row in raw["footprint"]:
            lines.append(
                f"| {row['pods']:,} | {row['rss_mib']:.0f} MiB | {row['hwm_mib']:.0f} MiB | {row['cpu_idle_percent']:.1f}% "
                f"| {row['cpu_while_creating_percent']:.1f}% | {row['create_seconds']:.0f} s |"
            )
    if raw.get("leases"):
        lines += [
            "",
            "Lease terms lost by the operator (cumulative, as each workload ended)",
            "| after | minutes | terms lost | load average |",
            "|---|---|---|---|",
        ]
        for row in raw["leases"]:
            lines.append(f"| {row['workload']} | {row['minutes']:.0f} | {row['stopped_leading']} | {row['load']} |")
    return "\n".join(lines)


def run(args: Any) -> int:
    """`three_way.py --scale NODES`: both clusters grown to NODES workers, the scale workloads, one run."""
    plan = ScalePlan(nodes=args.scale)
    if args.sizes:
        plan = ScalePlan(**{**plan.__dict__, "sizes": [int(s) for s in args.sizes.split(",")]})
    if args.runs:
        plan = ScalePlan(**{**plan.__dict__, "runs": args.runs})
    if args.workloads:
        plan = ScalePlan(**{**plan.__dict__, "workloads": tuple(args.workloads.split(","))})
    if args.scale_pods:
        plan = ScalePlan(**{**plan.__dict__, "levels": [int(s) for s in args.scale_pods.split(",")]})
    if args.scale_gangs:
        plan = ScalePlan(**{**plan.__dict__, "burst": args.scale_gangs, "waiting": args.scale_gangs})
    if args.scale_budget:
        plan = ScalePlan(**{**plan.__dict__, "budget": args.scale_budget})
    if args.scale_changes:
        plan = ScalePlan(**{**plan.__dict__, "changes": args.scale_changes})
    spec = {
        "workers": START_WORKERS,
        "gpus_per_worker": tw.GPUS_PER_WORKER,
        "driver": "fakegpu",
        "controller_qps": args.controller_qps,
        "node_lease_parallelism": NODE_LEASE_PARALLELISM,
        "node_monitor_grace": NODE_MONITOR_GRACE,
    }
    phalanx = LocalCluster(ClusterSpec(name=f"{args.name}-phalanx", **spec))
    # the in-tree cluster (and vanilla) only for the workloads run three ways
    three = {"latency", "burst"} & set(plan.workloads)
    upstream = LocalCluster(ClusterSpec(name=f"{args.name}-intree", upstream_gang=True, **spec)) if three else None
    started = time.monotonic()
    raw: dict[str, Any] = {"latency": {}, "burst": {}, "waiting": [], "footprint": [], "grow_seconds": {}, "leases": []}
    raw["operator_args"] = list(args.operator_arg)  # a setting measured is recorded with its figures

    def prepare(cluster: LocalCluster) -> None:
        raw["grow_seconds"][cluster.spec.name] = asyncio.run(grow(cluster, plan.nodes, tw.GPUS_PER_WORKER))
        say(f"{cluster.spec.name}: {plan.nodes} workers in {raw['grow_seconds'][cluster.spec.name]:.0f} s")
        raw.setdefault("nodes_nice", {})[cluster.spec.name] = prioritise_nodes(cluster)

    reported = False
    try:
        with tw.running(phalanx, upstream, args.repo, prepare, tuple(args.operator_arg)) as operator:
            asyncio.run(measure(plan, phalanx, upstream, operator, raw))
            report(plan, raw, started)  # before the clusters are torn down, which takes minutes at this size
            reported = True
    finally:
        if not reported:
            report(plan, raw, started)
    return 0


def processes(way: tw.Way) -> list[int]:
    """The pids of a way's cluster, in kwokctl's pid files' order (etcd first, kwok's controller last), then of its
    operator."""
    pids = [int(path.read_text().strip()) for path in sorted((way.cluster.cluster_dir / "pids").glob("*.pid"))]
    return pids + ([way.operator.process.pid] if way.operator else [])


@contextlib.asynccontextmanager
async def alone(way: tw.Way, ways: Iterable[tw.Way]) -> AsyncIterator[None]:
    """`way` measured with every other cluster (and the operator on it) stopped (SIGSTOP), continued after: each way
    gets the machine's 2 cores to itself. Beside a measured burst, the other cluster's idle load took 0.44 of a core
    in vanilla's run and 0.72 in Phalanx's (`scale-5000-burst-20261207T2245Z-stopped.log`; its kwok's node status
    heartbeats falling in that window, and the aftermath of the last way's gangs): an unequal share of the CPU that
    the ways are bound by. A stopped cluster's nodes stay Ready (`NODE_MONITOR_GRACE`), so it resumes as it stopped:
    once its API server answers again and its operator leads again (`resumed`), its pods are listed and watched
    afresh, and it is measured in turn."""
    others = {w.cluster.spec.name: w for w in ways if w.cluster is not way.cluster}
    pids = [pid for other in others.values() for pid in processes(other)]
    for pid in reversed(pids):
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        for other in others.values():
            await resumed(other)
            # the pod watch held open across the stop may never hear from that server again (the in-tree burst's
            # pods were all bound 260 s in while the watch had not shown one): listed and watched afresh
            await other.pods.stop()
            await other.pods.start()


async def resumed(way: tw.Way, timeout: float = 300) -> None:
    """Until a continued way's API server is ready, and its operator (if any) ready and leading again: stopped past
    its Lease's term, it stepped down on waking (its term is counted lost) and takes the Lease again."""
    deadline = time.monotonic() + timeout
    while True:
        answer = way.cluster.kubectl("get", "--raw", "/readyz", check=False)
        if answer.returncode == 0 and (way.operator is None or (way.operator.ready() and _renewed(way.cluster) < 3)):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{way.cluster.spec.name} not ready {timeout:.0f}s after it was continued: {answer.stderr}")
        await asyncio.sleep(1)


LEADER_LEASE = ("phalanx-system", "phalanx-leader")
"""The operator's Lease (`operatorproc.NAMESPACE`, `manager.Config.lease_name`)."""


def _renewed(cluster: LocalCluster) -> float:
    """Seconds since the operator's Lease was last renewed (infinite when it cannot be read)."""
    answer = cluster.kubectl("get", "lease", "-n", LEADER_LEASE[0], LEADER_LEASE[1], "-o", "jsonpath={.spec.renewTime}", check=False)
    try:
        renewed = datetime.datetime.fromisoformat(answer.stdout.strip())
    except ValueError:
        return float("inf")
    return (datetime.datetime.now(datetime.UTC) - renewed).total_seconds()


NODE_MONITOR_GRACE = "1h"
"""kube-controller-manager's node grace period in every cluster of the scale tier: a cluster stopped while another
is measured (`alone`, minutes) keeps its nodes Ready when it continues, instead of marking 5,000 NotReady at once
and writing each back."""
NODES_NICE = -5
"""The fake nodes' controller runs at this nice in every cluster of the scale tier."""
NODE_LEASE_PARALLELISM = 32
"""Node Leases kwok renews at once in every cluster of the scale tier (its default is 4). kwokctl has each of the
fake nodes renew its Lease every 50 s and the controller manager mark it NotReady after 200 s without one: 5,000
nodes need 100 renewals a second. Four at a time made 63 a second on vanilla's API server and 18 on the busier one
of Phalanx's 5,000-node burst (each took about 220 ms there), so its nodes went NotReady in hundreds; a real
cluster's kubelets each renew their own."""


def prioritise_nodes(cluster: LocalCluster) -> int:
    """Every thread of the cluster's kwok controller (the fake nodes) at NODES_NICE; returns how many.

    A real node's kubelet renews its Lease on its own CPUs. Here the fake nodes share the machine's 2 cores with
    both control planes, and in a 5,000-node burst that starved kwok (0.066 of a core against 0.089) saw 1,086
    NodeNotReady Events and their writes (node status, taints) in the way of the burst's: churn no real cluster of
    the same load has, which the figures charged to the system under test. The nice alone did not end it (a run at
    nice -5 still saw 4,349 node status writes); renewing more Leases at once did (`NODE_LEASE_PARALLELISM`). Both
    clusters get the same nice, so vanilla, in-tree and Phalanx are measured alike."""
    pid = int((cluster.cluster_dir / "pids" / "kwok-controller.pid").read_text().strip())
    threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    for tid in threads:  # a nice is a thread's on Linux; threads made later take their maker's
        os.setpriority(os.PRIO_PROCESS, tid, NODES_NICE)
    return len(threads)


def report(plan: ScalePlan, raw: dict[str, Any], started: float) -> None:
    """The tables, and the JSON beside them; nothing when nothing was measured."""
    if not any(raw[k] for k in ("latency", "burst", "waiting", "footprint")):
        return
    text = tables(plan, raw)
    print(text)
    tw.RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = tw.RESULTS / f"scale-{plan.nodes}-{stamp}.json"
    doc = {"plan": plan.__dict__, "seconds": time.monotonic() - started, "load": _load(), "raw": raw}
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"\nwritten to {path.relative_to(tw.ROOT)} ({time.monotonic() - started:.0f} s in all; load average {_load()})")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
