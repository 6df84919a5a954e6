"""The same gang workloads three ways, in one run: kube-scheduler alone, Phalanx, and the in-tree gang feature.

A standalone script, not a test: it prints a table of absolute figures and
ratios and writes it as JSON under benchmarks/results/, and asserts nothing
about time. Two local control planes run side by side (kwok workers x 8
devices published by the `fakegpu` stand-in), and the runs of the three
schedulers are interleaved, so a machine that gets busier mid-run slows all
three alike:

  phalanx   cluster with the operator (its ServiceAccount, its webhooks);
            Jobs carry `scheduling.phalanx.dev/min-count`;
  in-tree   cluster with GenericWorkload, WorkloadWithJob and
            DRAWorkloadResourceClaims on (`ClusterSpec(upstream_gang=True)`);
            Jobs carry `spec.scheduling.schedulingPolicy.gang.minCount`;
  vanilla   the in-tree cluster, Jobs without `spec.scheduling`: the default
            kube-scheduler with no gang semantics and no operator.

Workloads:

  latency     one gang of N ranks (1 device each): Job creation -> every member
              bound (create->bound), and every member present with its claim ->
              every member bound (quorum->bound); median of --runs runs; and
              where the time after quorum goes: when the first and the last
              gate was lifted (Phalanx) and the first member was bound;
  throughput  G gangs of 8 submitted at once on capacity for C of them (the
              other workers are tainted for the duration); a gang whose 8
              members are bound is finished (its Job deleted) after a random
              hold of 2-8 s (seeded, the same for the three). Reported: gangs
              admitted per second (admitted / time to the last admission, or
              to the time limit), mean device utilisation and its series, and
              stranded device-seconds: devices held (bound members) by a gang
              that is not whole, counted once that gang has held devices for
              5 s without becoming whole (an admission in progress is not a
              deadlock; vanilla's partial gangs are);
  footprint   the operator's resident memory and CPU with P pods in the Phalanx
              cluster (bound directly to the workers, no claims): idle before,
              while they are created, and idle after;
  recovery    one gang of N ranks running (1 s grace, the README's
              podFailurePolicy), one member evicted: seconds from the moment
              the last member that stopped has stopped to every rank running
              again (Phalanx: the whole gang, torn down by disruptionMode all;
              vanilla: the evicted pod alone, replaced by the Job controller;
              in-tree 1.37 has no disruptionMode all, so it is not run);
              median of --runs runs. Target (issue 22): under 15 s.
  starvation  the Phalanx cluster only: a stream of 1-GPU pods keeps every
              device busy, then a gang of --starvation-size ranks (64) waits
              at the head of the line; its wait with the hold (hold-after
              10 s) and without (hold-after 0: today's behaviour), see
              benchmarks/starvation.py; its cluster has 2 workers more than
              the gang needs, for the stream to backfill;
  queue       no cluster: the queue's own cost per cycle with 1,000 waiting
              gangs (benchmarks/queue_cost.py).

Usage: python benchmarks/three_way.py [--quick] [--sizes 4,32,128,512] [--recovery-sizes 4,32,128] [--runs 3]
       python benchmarks/three_way.py --scale 1000 [--scale-pods 10000,50000,100000] [--scale-gangs 1000] (see scale.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import queue_cost
import starvation
from kubernetes_asyncio import client, watch

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GPUS_PER_WORKER = 8
GANG_OF = 8
NAMESPACE = "bench"
WAYS = ("vanilla", "phalanx", "in-tree")
STRANDED_AFTER = 5.0
CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]}}},
}


def job(name: str, size: int, way: str, *, recoverable: bool = False) -> dict[str, Any]:
    """One rank per pod, one device per rank; the gang spelled as `way` reads it. `recoverable`: the README's
    podFailurePolicy (an evicted rank spends no backoffLimit) and a 1 s grace, as a recovery run needs."""
    spec: dict[str, Any] = {
        "parallelism": size,
        "completions": size,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": {"bench-gang": name}},
            "spec": {
                "restartPolicy": "Never",
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "containers": [
                    {
                        "name": "rank",
                        "image": "busybox:1.36",
                        "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "50m"}, "claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    }
    if recoverable:
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    annotations = {}
    if way == "phalanx":
        annotations["scheduling.phalanx.dev/min-count"] = str(size)
    elif way == "in-tree":
        spec["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": size}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


class Pods:
    """Every pod (or, with `lister`, every object of another kind) of the bench namespace, from one list-then-watch;
    `changed` ticks on each event."""

    def __init__(self, api: client.ApiClient, lister: Callable[..., Any] | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.lister = lister or self.core.list_namespaced_pod
        self.store: dict[str, dict[str, Any]] = {}
        self._tick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.lister(NAMESPACE)
        self.store = {p.metadata.name: self.core.api_client.sanitize_for_serialization(p) for p in listed.items}
        self._task = asyncio.create_task(self._run(listed.metadata.resource_version))

    async def _run(self, version: str) -> None:
        while True:
            try:
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        self.lister, NAMESPACE, resource_version=version, timeout_seconds=600, _request_timeout=620
                    ):
                        pod = event["raw_object"]
                        version = pod["metadata"]["resourceVersion"]
                        if event["type"] == "DELETED":
                            self.store.pop(pod["metadata"]["name"], None)
                        else:
                            self.store[pod["metadata"]["name"]] = pod
                        tick, self._tick = self._tick, asyncio.Event()
                        tick.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # an expired version: list again
                listed = await self.lister(NAMESPACE)
                self.store = {p.metadata.name: self.core.api_client.sanitize_for_serialization(p) for p in listed.items}
                version = listed.metadata.resource_version

    async def until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick.wait(), min(left, 1.0))
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def of(self, gang: str) -> list[dict[str, Any]]:
        return [p for p in self.store.values() if (p["metadata"].get("labels") or {}).get("bench-gang") == gang]


@dataclass
class Way:
    """One scheduler under test: its cluster, its API client, its pod watch."""

    name: str
    cluster: LocalCluster
    api: client.ApiClient
    pods: Pods
    operator: operatorproc.OperatorProcess | None = None
    namespace: str = NAMESPACE

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    async def submit(self, name: str, size: int, *, recoverable: bool = False, annotations: dict[str, str] | None = None) -> None:
        body = job(name, size, self.name, recoverable=recoverable)
        body["metadata"]["annotations"].update(annotations or {})
        await self.batch.create_namespaced_job(NAMESPACE, body)

    async def finish(self, name: str) -> None:
        with contextlib.suppress(client.ApiException):
            await self.batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")

    async def drained(self, timeout: float = 300) -> None:
        """Nothing of the previous run left: no pod, no claim (a claim goes after its pod)."""
        resource = client.ResourceV1Api(self.api)
        deadline = time.monotonic() + timeout
        while self.pods.store or (await resource.list_namespaced_resource_claim(NAMESPACE)).items:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the previous run's pods and claims did not go away in {timeout:.0f}s")
            await asyncio.sleep(0.3)


def _bound(pods: list[dict[str, Any]]) -> int:
    return sum(1 for p in pods if p["spec"].get("nodeName"))


TIMELINE = ("quorum_to_first_lift", "quorum_to_last_lift", "quorum_to_first_bound")
"""Where the time after quorum goes, seen through the same watch: the first and last gate lifted (Phalanx's pods
only are gated), and the first member bound."""


async def latency_run(way: Way, size: int, timeout: float) -> dict[str, float | None]:
    """create->bound and quorum->bound of one gang, and its timeline after quorum, seconds (None: not every member
    bound within `timeout`; a timeline point that did not happen)."""
    name = f"lat-{size}"
    started = time.monotonic()
    await way.submit(name, size)
    quorum_at: float | None = None
    gated: set[str] = set()
    lifted: dict[str, float] = {}
    bound: dict[str, float] = {}

    def done() -> bool:
        nonlocal quorum_at
        pods = way.pods.of(name)
        now = time.monotonic()
        for pod in pods:
            pod_name = pod["metadata"]["name"]
            if pod["spec"].get("schedulingGates"):
                gated.add(pod_name)
            elif pod_name in gated:
                lifted.setdefault(pod_name, now)
            if pod["spec"].get("nodeName"):
                bound.setdefault(pod_name, now)
        if quorum_at is None and len(pods) >= size and all((p.get("status") or {}).get("resourceClaimStatuses") for p in pods):
            quorum_at = now
        return len(pods) >= size and _bound(pods) >= size

    ok = await way.pods.until(done, timeout)
    bound_at = time.monotonic()
    await way.finish(name)
    if not ok:
        await way.drained(timeout=max(300.0, size * 0.5))
        return {"create_to_bound": None, "quorum_to_bound": None} | dict.fromkeys(TIMELINE)
    quorum = quorum_at or bound_at

    def after(times: list[float]) -> float | None:
        return times[0] - quorum if times else None

    lifts = sorted(lifted.values())
    sample = {
        "create_to_bound": bound_at - started,
        "quorum_to_bound": bound_at - quorum,
        "quorum_to_first_lift": after(lifts),
        "quorum_to_last_lift": after(lifts[-1:]),
        "quorum_to_first_bound": after(sorted(bound.values())),
    }
    # said before the drain, which a big gang's pods and claims can outlast: a figure measured is never lost to it
    print(f"latency {way.name} {size} ranks: {sample}", file=sys.stderr, flush=True)
    await way.drained(timeout=max(300.0, size * 0.5))
    return sample


def _running(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and not pod["metadata"].get("deletionTimestamp") and pod["status"].get("phase") == "Running"


def _ended(pod: dict[str, Any] | None) -> bool:
    return pod is None or (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


async def recovery_run(way: Way, size: int, timeout: float) -> dict[str, float | None]:
    """One member of a running gang evicted: seconds from the eviction to the last member stopping (gone, or
    ended), and from then to `size` ranks running again, every stopped one replaced (None: not within `timeout`)."""
    name = f"rec-{size}"
    await way.submit(name, size, recoverable=True)
    none = {"evict_to_last_stopped": None, "last_stopped_to_running": None} | dict.fromkeys(RECOVERY_TIMELINE)
    claims = Pods(way.api, client.ResourceV1Api(way.api).list_namespaced_resource_claim)
    await claims.start()
    try:
        if not await way.pods.until(lambda: sum(map(_running, way.pods.of(name))) >= size, max(120.0, size * 0.6)):
            return none
        first = {p["metadata"]["uid"]: p for p in way.pods.of(name)}
        held = {c["metadata"]["uid"] for c in claims.store.values() if (c.get("status") or {}).get("allocation")}
        victim = next(iter(first.values()))["metadata"]["name"]
        evicted = time.monotonic()
        await client.CoreV1Api(way.api).create_namespaced_pod_eviction(
            victim, NAMESPACE, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": NAMESPACE}}
        )
        stopped: dict[str, float] = {}
        seen: dict[str, float] = {}

        def back() -> bool:
            now = time.monotonic()
            by_uid = {p["metadata"]["uid"]: p for p in way.pods.of(name)}
            new = [p for uid, p in by_uid.items() if uid not in first]
            if new:
                seen.setdefault("first_created", now)
            if not any(c["metadata"]["uid"] in held and (c.get("status") or {}).get("allocation") for c in claims.store.values()):
                seen.setdefault("old_freed", now)
            if len(new) >= size:
                seen.setdefault("all_created", now)
                if all((p.get("status") or {}).get("resourceClaimStatuses") for p in new):
                    seen.setdefault("all_claimed", now)
                if not any(p["spec"].get("schedulingGates") for p in new):
                    seen.setdefault("all_lifted", now)
            if len(new) >= len(stopped) and stopped and all(p["spec"].get("nodeName") for p in new):
                seen.setdefault("all_bound", now)
            for uid in first:
                if uid not in stopped and _ended(by_uid.get(uid)):
                    stopped[uid] = now
            stopping = any(by_uid.get(uid, {}).get("metadata", {}).get("deletionTimestamp") and uid not in stopped for uid in first)
            # Phalanx takes the whole gang down: it is back once every member of the first incarnation has stopped
            whole = way.name != "phalanx" or len(stopped) == len(first)
            return bool(stopped) and whole and not stopping and sum(map(_running, by_uid.values())) >= size

        if not await way.pods.until(back, timeout):
            return none
        last = max(stopped.values())
        timeline = {
            key: seen[key.removeprefix("last_stopped_to_")] - last if key.removeprefix("last_stopped_to_") in seen else None
            for key in RECOVERY_TIMELINE
        }
        return {"evict_to_last_stopped": last - evicted, "last_stopped_to_running": time.monotonic() - last} | timeline
    finally:
        await claims.stop()
        await way.finish(name)
        await way.drained()


RECOVERY_TIMELINE = (
    "last_stopped_to_old_freed",
    "last_stopped_to_first_created",
    "last_stopped_to_all_created",
    "last_stopped_to_all_claimed",
    "last_stopped_to_all_lifted",
    "last_stopped_to_all_bound",
)
"""Where a recovery's time goes, from the last member stopped: every device of the first incarnation free (its claims
deallocated or gone), the Job's first new pod seen (its back-off over), every
new pod created, every one with its claim (the resourceclaim controller's), every gate lifted (Phalanx's release), and
every stopped one replaced and bound (a point reached before the last one stopped reads negative)."""

RECOVERY_LOG = ("members released", "torn down", "undone", "leader election", "Unschedulable", "freed the devices")
"""What the operator logs of a recovery that the bench prints under its sample: the teardown, each release's steps,
an attempt undone, a Lease lost, the claims of the members torn down that Phalanx freed."""

RECOVERY_TARGET = 15.0
"""Issue 22: a torn-down gang runs again within this many seconds of its last member stopping."""


@dataclass
class Gang:
    name: str
    first_held: float | None = None
    admitted: float | None = None
    finish_at: float | None = None


@dataclass
class Throughput:
    admitted: int = 0
    elapsed: float = 0.0
    utilisation: list[tuple[float, float]] = field(default_factory=list)
    stranded_device_seconds: float = 0.0


async def throughput_run(way: Way, gangs: int, capacity: int, limit: float, seed: int, interval: float = 0.25) -> Throughput:
    """Submit every gang at once; finish each admitted gang after its hold; sample until all are admitted or `limit`."""
    devices = capacity * GANG_OF
    holds = random.Random(seed)
    state = {f"tp-{i:03d}": Gang(f"tp-{i:03d}") for i in range(gangs)}
    started = time.monotonic()
    await asyncio.gather(*(way.submit(g, GANG_OF) for g in state))
    result = Throughput()
    by_gang: dict[str, int] = {}
    finishing: list[asyncio.Task[None]] = []
    while True:
        now = time.monotonic()
        by_gang.clear()
        for pod in way.pods.store.values():
            gang = (pod["metadata"].get("labels") or {}).get("bench-gang")
            if gang in state and pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                by_gang[gang] = by_gang.get(gang, 0) + 1
        for name, gang in state.items():
            held = by_gang.get(name, 0)
            if held and gang.first_held is None:
                gang.first_held = now
            if gang.admitted is None and held >= GANG_OF:
                gang.admitted = now
                gang.finish_at = now + holds.uniform(2.0, 8.0)
            if gang.admitted is None and held and gang.first_held is not None and now - gang.first_held > STRANDED_AFTER:
                result.stranded_device_seconds += held * interval
            if gang.finish_at is not None and now >= gang.finish_at:
                gang.finish_at = math.inf
                finishing.append(asyncio.create_task(way.finish(name)))
        result.utilisation.append((round(now - started, 2), sum(by_gang.values()) / devices))
        admitted = [g.admitted for g in state.values() if g.admitted is not None]
        if len(admitted) == gangs or now - started > limit:
            result.admitted = len(admitted)
            result.elapsed = (max(admitted) if len(admitted) == gangs else now) - started
            break
        await asyncio.sleep(interval)
    await asyncio.gather(*finishing, *(way.finish(g) for g in state))
    await way.drained()
    return result


def _proc_stat(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds so far) of one process, from /proc."""
    rss_kib = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss_kib / 1024, (int(fields[11]) + int(fields[12])) / ticks


def bound_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod bound directly to `node` (no scheduler, no claims): kwok runs it."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1m"}}}]},
    }


async def footprint(way: Way, pods: int, idle: float) -> dict[str, float]:
    """The operator's memory and CPU: idle, while `pods` pods are created (bound directly to workers), idle again."""
    assert way.operator is not None
    pid = way.operator.process.pid
    core = client.CoreV1Api(way.api)
    await core.create_namespace({"metadata": {"name": "ballast"}})
    workers = [n.metadata.name for n in (await core.list_node()).items if n.metadata.name.startswith("worker-")]
    _, cpu0 = _proc_stat(pid)
    await asyncio.sleep(idle)
    rss_idle, cpu1 = _proc_stat(pid)
    created = time.monotonic()
    queue = iter(range(pods))

    async def creator() -> None:
        for i in queue:
            await core.create_namespaced_pod("ballast", bound_pod(f"ballast-{i}", workers[i % len(workers)], {"app": "ballast"}))

    await asyncio.gather(*(creator() for _ in range(16)))
    creating = time.monotonic() - created
    rss_loaded, cpu2 = _proc_stat(pid)
    await asyncio.sleep(idle)
    rss_after, cpu3 = _proc_stat(pid)
    return {
        "pods": pods,
        "rss_idle_mib": rss_idle,
        "cpu_idle_percent": 100 * (cpu1 - cpu0) / idle,
        "rss_after_create_mib": rss_loaded,
        "cpu_while_creating_percent": 100 * (cpu2 - cpu1) / creating,
        "create_seconds": creating,
        "rss_loaded_idle_mib": rss_after,
        "cpu_loaded_idle_percent": 100 * (cpu3 - cpu2) / idle,
    }


@dataclass(frozen=True)
class Plan:
    sizes: list[int]
    runs: int
    gangs: int
    capacity: int
    limit: float
    ballast: int
    idle: float
    recovery_sizes: list[int] = field(default_factory=lambda: [4, 32, 128])
    workloads: tuple[str, ...] = ("latency", "throughput", "footprint", "recovery", "starvation", "queue")
    starvation_size: int = 64
    starvation_limit: float = 180.0
    recovery_ways: tuple[str, ...] = ("vanilla", "phalanx")

    @property
    def in_tree(self) -> bool:
        """Whether a workload compares with the in-tree cluster (starvation, queue and a Phalanx-only recovery need none)."""
        if "recovery" in self.workloads and "vanilla" in self.recovery_ways:
            return True
        return any(w in self.workloads for w in ("latency", "throughput", "footprint"))


QUICK = Plan(sizes=[4, 32], runs=2, gangs=24, capacity=6, limit=90, ballast=2000, idle=10, recovery_sizes=[4, 32])
FULL = Plan(sizes=[4, 32, 128, 512], runs=3, gangs=200, capacity=60, limit=240, ballast=10_000, idle=20)


def _say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


async def _open(name: str, cluster: LocalCluster, operator: operatorproc.OperatorProcess | None) -> Way:
    api = await cluster.api_client()
    pods = Pods(api)
    await pods.start()
    return Way(name, cluster, api, pods, operator)


async def _taint(way: Way, nodes: list[str], on: bool) -> None:
    core = client.CoreV1Api(way.api)
    taints = [{"key": "bench.phalanx.dev/off", "value": "true", "effect": "NoSchedule"}] if on else None
    for node in nodes:
        await core.patch_node(node, {"spec": {"taints": taints}})


async def measure(
    plan: Plan, phalanx: LocalCluster, upstream: LocalCluster | None, operator: operatorproc.OperatorProcess, out: dict[str, Any]
) -> None:
    """Fills `out` as it goes, so a run cut short still reports what it measured."""
    p = await _open("phalanx", phalanx, operator)
    tree = await _open("in-tree", upstream, None) if upstream is not None else p
    vanilla = Way("vanilla", tree.cluster, tree.api, tree.pods)
    ways = {"vanilla": vanilla, "phalanx": p, "in-tree": tree}
    try:
        if "starvation" in plan.workloads:
            devices = phalanx.spec.workers * GPUS_PER_WORKER
            for label, hold_after in (("hold", starvation.HOLD_AFTER), ("no hold", 0)):

                async def submit(name: str, size: int, annotations: dict[str, str]) -> None:
                    await p.submit(name, size, annotations=annotations)

                sample = await starvation.starvation_run(
                    p, submit, plan.starvation_size, devices, hold_after, plan.starvation_limit, seed=7
                )
                out["starvation"][label] = sample
                _say(f"starvation {plan.starvation_size} ranks, {label}: {sample}")
        for size in plan.sizes if "latency" in plan.workloads else []:
            samples: dict[str, list[dict[str, float | None]]] = {w: [] for w in WAYS}
            out["latency"][size] = samples
            for run in range(plan.runs):
                for w in WAYS:
                    seen = len(operator.logs()) if w == "phalanx" else 0
                    sample = await latency_run(ways[w], size, timeout=max(120.0, size * 0.6))
                    samples[w].append(sample)
                    _say(f"latency {size} ranks run {run + 1} {w}: {sample}")
                    if w == "phalanx":
                        for line in operator.logs()[seen:].splitlines():
                            if "members released" in line:
                                _say(f"  operator: {line.split(': ', 1)[-1]}")
        if "throughput" in plan.workloads:
            off = [f"worker-{i}" for i in range(plan.capacity + 1, phalanx.spec.workers + 1)]
            for w in (p, tree):
                await _taint(w, off, True)
            for w in WAYS:
                tp = await throughput_run(ways[w], plan.gangs, plan.capacity, plan.limit, seed=7)
                out["throughput"][w] = tp.__dict__
                _say(
                    f"throughput {w}: {tp.admitted} of {plan.gangs} admitted in {tp.elapsed:.1f}s, stranded {tp.stranded_device_seconds:.0f}"
                )
            for w in (p, tree):
                await _taint(w, off, False)
        for size in plan.recovery_sizes if "recovery" in plan.workloads else []:
            runs: dict[str, list[dict[str, float | None]]] = {w: [] for w in plan.recovery_ways}
            out["recovery"][size] = runs
            for run in range(plan.runs):
                for w in runs:
                    seen = len(operator.logs()) if w == "phalanx" else 0
                    sample = await recovery_run(ways[w], size, timeout=900)
                    runs[w].append(sample)
                    _say(f"recovery {size} ranks run {run + 1} {w}: {sample}")
                    if w == "phalanx":
                        lines = operator.logs()[seen:].splitlines()
                        sample["lease_lost"] = float(sum(1 for line in lines if "stopped leading" in line))
                        for line in lines:
                            if any(word in line for word in RECOVERY_LOG):
                                _say(f"  operator: {line}")
        if "footprint" in plan.workloads:
            out["footprint"] = await footprint(p, plan.ballast, plan.idle)
            _say(f"footprint: {out['footprint']}")
    finally:
        for w in {id(w): w for w in (p, tree)}.values():
            await w.pods.stop()
            await w.api.close()


def _median(samples: list[dict[str, float | None]], key: str) -> float | None:
    """None when a run timed out (or none ran): a median that hides a timeout would flatter."""
    values = [s[key] for s in samples if s[key] is not None]
    return statistics.median(values) if values and len(values) == len(samples) else None


def _fmt(value: float | None, unit: str = "") -> str:
    return "timeout" if value is None else f"{value:.2f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def summarise(plan: Plan, raw: dict[str, Any]) -> dict[str, Any]:
    latency = []
    for size, samples in raw["latency"].items():
        row: dict[str, Any] = {"ranks": size}
        for w in WAYS:
            row[w] = {key: _median(samples[w], key) for key in ("create_to_bound", "quorum_to_bound", *TIMELINE)}
            row[w]["runs"] = len(samples[w])
        latency.append(row)
    throughput = {}
    for w, tp in raw["throughput"].items():
        series = [u for _, u in tp["utilisation"]]
        throughput[w] = {
            "admitted": tp["admitted"],
            "gangs": plan.gangs,
            "seconds": tp["elapsed"],
            "gangs_per_second": tp["admitted"] / tp["elapsed"] if tp["elapsed"] else 0.0,
            "mean_utilisation": statistics.fmean(series) if series else 0.0,
            "stranded_device_seconds": tp["stranded_device_seconds"],
        }
    recovery = []
    for size, runs in raw.get("recovery", {}).items():
        row = {"ranks": size}
        for w, samples in runs.items():
            row[w] = {key: _median(samples, key) for key in ("evict_to_last_stopped", "last_stopped_to_running", *RECOVERY_TIMELINE)}
            row[w]["runs"] = len(samples)
            row[w]["lease_lost"] = sum(s.get("lease_lost") or 0 for s in samples)
        recovery.append(row)
    return {
        "latency": latency,
        "throughput": throughput,
        "footprint": raw.get("footprint"),
        "recovery": recovery,
        "starvation": raw.get("starvation"),
        "starvation_devices": raw.get("starvation_devices"),
        "queue": raw.get("queue"),
        "controller_qps": raw.get("controller_qps"),
    }


def table(plan: Plan, summary: dict[str, Any]) -> str:
    return "\n".join([*_latency_table(plan, summary), *_throughput_table(plan, summary), *_rest_table(plan, summary)]).strip("\n")


def _latency_table(plan: Plan, summary: dict[str, Any]) -> list[str]:
    if not summary["latency"]:
        return []
    lines = [
        f"latency: one gang, 1 device per rank, median of {plan.runs} runs, seconds",
        "| ranks | vanilla create->bound | in-tree create->bound | Phalanx create->bound | Phalanx quorum->bound "
        "| in-tree quorum->bound | Phalanx / vanilla | Phalanx / in-tree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["latency"]:
        if any(not row[w]["runs"] for w in WAYS):
            continue  # cut short before every scheduler ran this size
        v, t, p = (row[w]["create_to_bound"] for w in ("vanilla", "in-tree", "phalanx"))
        lines.append(
            f"| {row['ranks']} | {_fmt(v)} | {_fmt(t)} | {_fmt(p)} | {_fmt(row['phalanx']['quorum_to_bound'])} "
            f"| {_fmt(row['in-tree']['quorum_to_bound'])} | {_ratio(p, v)} | {_ratio(p, t)} |"
        )
    lines += [
        "",
        "after quorum, median seconds: the first and last gate Phalanx lifted, the first and last member bound",
        "| ranks | Phalanx first lift | Phalanx last lift | Phalanx first bound | Phalanx all bound "
        "| in-tree first bound | in-tree all bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["latency"]:
        if any(not row[w]["runs"] for w in WAYS):
            continue
        p, t = row["phalanx"], row["in-tree"]
        lines.append(
            f"| {row['ranks']} | {_fmt(p.get('quorum_to_first_lift'))} | {_fmt(p.get('quorum_to_last_lift'))} "
            f"| {_fmt(p.get('quorum_to_first_bound'))} | {_fmt(p['quorum_to_bound'])} "
            f"| {_fmt(t.get('quorum_to_first_bound'))} | {_fmt(t['quorum_to_bound'])} |"
        )
    return lines


def _throughput_table(plan: Plan, summary: dict[str, Any]) -> list[str]:
    if not summary["throughput"]:
        return []
    lines = [
        "",
        f"throughput: {plan.gangs} gangs of {GANG_OF} submitted at once, capacity for {plan.capacity}, "
        f"holds 2-8 s, limit {plan.limit:.0f} s",
        "| scheduler | admitted | seconds | gangs/s | mean device utilisation | stranded device-seconds |",
        "|---|---|---|---|---|---|",
    ]
    for w in WAYS:
        t = summary["throughput"].get(w)
        if t:
            lines.append(
                f"| {w} | {t['admitted']}/{t['gangs']} | {t['seconds']:.1f} | {t['gangs_per_second']:.2f} "
                f"| {100 * t['mean_utilisation']:.0f}% | {t['stranded_device_seconds']:.0f} |"
            )
    tp = summary["throughput"]
    if "phalanx" in tp and "vanilla" in tp and "in-tree" in tp:
        rate = {w: tp[w]["gangs_per_second"] for w in WAYS}
        lines.append(
            f"gangs/s ratios: Phalanx / vanilla {_ratio(rate['phalanx'], rate['vanilla'])}, "
            f"Phalanx / in-tree {_ratio(rate['phalanx'], rate['in-tree'])}"
        )
    return lines


def _rest_table(plan: Plan, summary: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if summary.get("recovery"):
        lines += [
            "",
            f"recovery: one gang running, one member evicted (1 s grace, podFailurePolicy Ignore on DisruptionTarget), "
            f"median of {plan.runs} runs, seconds; target: running again within {RECOVERY_TARGET:.0f} s of the last stop; "
            f"kube-controller-manager --kube-api-qps {summary.get('controller_qps') or '20 (its default)'}",
            "| ranks | Phalanx eviction->last member stopped | last stopped->old devices free | ->first new pod | ->all claimed "
            "| ->all lifted | ->all bound | ->all running | vanilla (the evicted pod alone) stopped->running | within target "
            "| Leases lost |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in summary["recovery"]:
            p, v = row["phalanx"], row.get("vanilla")
            back = p["last_stopped_to_running"]
            ok = "-" if back is None else ("yes" if back <= RECOVERY_TARGET else "no")
            lines.append(
                f"| {row['ranks']} | {_fmt(p['evict_to_last_stopped'])} | {_fmt(p.get('last_stopped_to_old_freed'))} "
                f"| {_fmt(p.get('last_stopped_to_first_created'))} "
                f"| {_fmt(p.get('last_stopped_to_all_claimed'))} | {_fmt(p.get('last_stopped_to_all_lifted'))} "
                f"| {_fmt(p.get('last_stopped_to_all_bound'))} | {_fmt(back)} "
                f"| {_fmt(v['last_stopped_to_running']) if v else 'not run'} | {ok} | {p.get('lease_lost', 0):.0f} |"
            )
    if summary.get("starvation"):
        lines += starvation.table(plan.starvation_size, summary["starvation_devices"], summary["starvation"])
    if summary.get("queue"):
        lines += queue_cost.table(summary["queue"])
    fp = summary.get("footprint")
    if fp:
        lines += [
            "",
            f"operator footprint with {fp['pods']:,} pods",
            "| idle RSS | RSS after create | RSS loaded idle | CPU idle | CPU while creating | CPU loaded idle | create time |",
            "|---|---|---|---|---|---|---|",
            f"| {fp['rss_idle_mib']:.0f} MiB | {fp['rss_after_create_mib']:.0f} MiB | {fp['rss_loaded_idle_mib']:.0f} MiB "
            f"| {fp['cpu_idle_percent']:.1f}% | {fp['cpu_while_creating_percent']:.1f}% | {fp['cpu_loaded_idle_percent']:.1f}% "
            f"| {fp['create_seconds']:.0f} s |",
        ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and runs, a smaller throughput and footprint (a few minutes)")
    parser.add_argument("--sizes", help="gang sizes, comma separated (default 4,32,128,512; quick 4,32)")
    parser.add_argument("--runs", type=int, help="runs per size and scheduler (default 3; quick 2)")
    parser.add_argument("--gangs", type=int, help="throughput: gangs of 8 submitted (default 200; quick 24)")
    parser.add_argument("--capacity", type=int, help="throughput: gangs that fit at once (default 60; quick 6)")
    parser.add_argument("--pods", type=int, help="footprint: pods in the cluster (default 10,000; quick 2,000)")
    parser.add_argument("--recovery-sizes", help="recovery: gang sizes, comma separated (default 4,32,128; quick 4,32)")
    parser.add_argument(
        "--recovery-ways", help="recovery: which to run, comma separated (default vanilla,phalanx; phalanx alone needs no in-tree cluster)"
    )
    parser.add_argument("--workloads", help="which to run, comma separated (default latency,throughput,footprint,recovery)")
    parser.add_argument(
        "--controller-qps",
        type=int,
        help="kube-controller-manager's --kube-api-qps on both clusters (burst 1.5x; default: its own, 20): what a cluster with big gangs raises",
    )
    parser.add_argument("--starvation-size", type=int, help="starvation: ranks of the head gang (default 64)")
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for the operator, repeatable (e.g. --operator-arg=--release-concurrency=8): a setting measured",
    )
    parser.add_argument("--name", default="bench", help="cluster name prefix (two clusters: NAME-phalanx, NAME-intree)")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose CRDs and RBAC to install (default: this one)")
    parser.add_argument(
        "--scale", type=int, metavar="NODES", help="the scale tier instead (benchmarks/scale.py): NODES kwok workers, e.g. 1000 or 5000"
    )
    parser.add_argument("--scale-pods", help="scale tier: footprint levels, comma separated (default 10000,50000,100000)")
    parser.add_argument("--scale-gangs", type=int, help="scale tier: gangs of 3 in the burst and waiting (default 1000)")
    parser.add_argument(
        "--scale-changes", type=int, help="scale tier: pods added, then deleted, in each waiting window (default 20; more reads finer)"
    )
    parser.add_argument("--scale-budget", type=float, help="scale tier: seconds of pod creation for the footprint, in all (default 1800)")
    args = parser.parse_args()
    if args.scale:
        import scale  # benchmarks/ is the script's directory, not a package

        return scale.run(args)
    plan = QUICK if args.quick else FULL
    if args.sizes:
        plan = Plan(**{**plan.__dict__, "sizes": [int(s) for s in args.sizes.split(",")]})
    if args.runs:
        plan = Plan(**{**plan.__dict__, "runs": args.runs})
    if args.recovery_sizes:
        plan = Plan(**{**plan.__dict__, "recovery_sizes": [int(s) for s in args.recovery_sizes.split(",")]})
    for flag, knob in (("gangs", "gangs"), ("capacity", "capacity"), ("pods", "ballast")):
        if getattr(args, flag):
            plan = Plan(**{**plan.__dict__, knob: getattr(args, flag)})
    if args.workloads:
        plan = Plan(**{**plan.__dict__, "workloads": tuple(args.workloads.split(","))})
    if args.starvation_size:
        plan = Plan(**{**plan.__dict__, "starvation_size": args.starvation_size})
    if args.recovery_ways:
        plan = Plan(**{**plan.__dict__, "recovery_ways": tuple(args.recovery_ways.split(","))})
    largest = max([1, *(plan.sizes if "latency" in plan.workloads else []), *(plan.recovery_sizes if "recovery" in plan.workloads else [])])
    workers = max(math.ceil(largest / GPUS_PER_WORKER), plan.capacity if "throughput" in plan.workloads else 1)
    if "starvation" in plan.workloads:
        workers = max(workers, math.ceil(plan.starvation_size / GPUS_PER_WORKER) + 2)
    spec = {"workers": workers, "gpus_per_worker": GPUS_PER_WORKER, "driver": "fakegpu", "controller_qps": args.controller_qps}
    phalanx = LocalCluster(ClusterSpec(name=f"{args.name}-phalanx", **spec))
    upstream = LocalCluster(ClusterSpec(name=f"{args.name}-intree", upstream_gang=True, **spec)) if plan.in_tree else None
    started = time.monotonic()
    raw: dict[str, Any] = {
        "latency": {},
        "throughput": {},
        "recovery": {},
        "starvation": {},
        "starvation_devices": workers * GPUS_PER_WORKER,
        "controller_qps": args.controller_qps,
    }
    if "queue" in plan.workloads:
        raw["queue"] = queue_cost.measure()
        _say(f"queue: {raw['queue']}")
    if plan.workloads == ("queue",):
        report(args, plan, 0, started, raw)
        return 0
    try:
        with running(phalanx, upstream, args.repo, operator_args=tuple(args.operator_arg)) as operator:
            asyncio.run(measure(plan, phalanx, upstream, operator, raw))
    finally:
        report(args, plan, workers, started, raw)
    return 0


@contextlib.contextmanager
def running(
    phalanx: LocalCluster,
    upstream: LocalCluster | None,
    repo: Path,
    prepare: Callable[[LocalCluster], None] = lambda _: None,
    operator_args: tuple[str, ...] = (),
) -> Iterator[operatorproc.OperatorProcess]:
    """Both clusters up (each `prepare`d), the bench namespace and claim template in each, the operator on Phalanx's
    (with `operator_args` after its own); all stopped on the way out, SIGTERM included."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    clusters = [c for c in (phalanx, upstream) if c is not None]
    operator = None
    try:
        for cluster in clusters:
            _up(cluster)
            prepare(cluster)
            cluster.kubectl("create", "namespace", NAMESPACE)
            cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(CLAIM_TEMPLATE))
        operator = operatorproc.start(phalanx, repo, extra_args=operator_args)
        yield operator
    finally:
        if operator is not None:
            operator.stop()
        for cluster in clusters:
            cluster.down()


def _up(cluster: LocalCluster) -> None:
    """Once more on failure: kwokctl picks its ports before starting the processes, and on a machine where other
    clusters start at the same time one may be taken in between (`bind: address already in use`)."""
    try:
        cluster.up()
    except (RuntimeError, TimeoutError) as exc:
        _say(f"cluster {cluster.spec.name} did not come up ({exc}); once more")
        cluster.down()
        cluster.up()


def report(args: argparse.Namespace, plan: Plan, workers: int, started: float, raw: dict[str, Any]) -> None:
    if (
        not raw["latency"]
        and not raw["throughput"]
        and not raw["recovery"]
        and not raw["starvation"]
        and not raw.get("queue")
        and "footprint" not in raw
    ):
        return  # nothing was measured
    summary = summarise(plan, raw)
    text = table(plan, summary)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"three_way-{'quick-' if args.quick else ''}{stamp}.json"
    doc = {"plan": plan.__dict__, "workers": workers, "seconds": time.monotonic() - started, "summary": summary, "raw": raw}
    out.write_text(json.dumps(doc, indent=1, default=str))
    print(f"\nwritten to {out.relative_to(ROOT)} ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    sys.exit(main())
