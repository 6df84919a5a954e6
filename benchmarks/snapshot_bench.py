"""What a burst of small gangs pays for the planner's snapshot at 5,000 nodes, without a cluster.

A standalone script, not a test: the loop's own cache (`scheduling.cache.ClusterCache`) over real informers fed
the scale tier's objects by hand (kwok nodes, one dra-example-driver slice of 8 GPUs per node, `--running` gangs
of 3 already bound with their claims allocated). Then `--gangs` times, as a burst does between two plans: a gang
of 3 is bound (its pods get a node, its claims an allocation, a few status writes follow), and the snapshot the
next plan reads is taken. It prints the time per snapshot and per plan of a gang of 3 on it, so the cost of the
snapshot is seen beside the planner's (the scale tier's burst: `./task bench -- --scale 5000 --workloads burst`).

At the end, the snapshot kept this way is checked against one built from scratch of the same objects (and that
build is timed): it exits non-zero when they differ.

Usage: python benchmarks/snapshot_bench.py [--nodes N] [--running N] [--gangs N]   (./task bench:snapshot)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client

from phalanx.api import keys
from phalanx.kinds import KINDS
from phalanx.kube.informers import ClusterView
from phalanx.planner import DeviceMatcher, Fits, plan
from phalanx.planner.model import Claim, DeviceRequest, Group, Member, frozen_map
from phalanx.scheduling import snapshots
from phalanx.scheduling.loop import SchedulingLoop
from phalanx_dev.localcluster import dradriver, fakegpu

NAMESPACE = "bench"
GANG = 3


class _Kube:
    """No API: the informers are fed by hand and nothing is written."""

    def __init__(self) -> None:
        self.api = client.ApiClient()


def pod(name: str, version: int, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "rank", "resources": {"requests": {"cpu": "50m"}}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
    }
    if node is None:
        spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    else:
        spec["nodeName"] = node
    meta = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"{name}-uid",
        "resourceVersion": str(version),
        "labels": {"bench-gang": name[:-2]},
    }
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def claim(name: str, version: int, node: str | None, device: str) -> dict[str, Any]:
    meta = {"name": f"{name}-gpu", "namespace": NAMESPACE, "uid": f"{name}-gpu-uid", "resourceVersion": str(version)}
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dradriver.DEVICE_CLASS}}]}}
    status: dict[str, Any] = {}
    if node is not None:
        result = {"request": "gpu", "driver": dradriver.DRIVER, "pool": node, "device": device}
        selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        status = {"allocation": {"devices": {"results": [result]}, "nodeSelector": selector}, "reservedFor": [{"resource": "pods"}]}
    return {"metadata": meta, "spec": spec, "status": status}


class Burst:
    def __init__(self, nodes: int) -> None:
        self.kube = _Kube()
        self.view = ClusterView(self.kube)  # type: ignore[arg-type]
        self.loop = SchedulingLoop(self.kube, self.view, KINDS)  # type: ignore[arg-type]
        self.names = fakegpu.worker_names(nodes)
        self.version = 1
        for i, name in enumerate(self.names):
            obj = fakegpu.node(name, fakegpu.NodeShape())
            obj["metadata"].update(uid=f"node-{i}", resourceVersion="1")
            self.view.nodes.apply("ADDED", obj)
            piece = fakegpu.resource_slice(name, f"node-{i}", 8)
            piece["metadata"].update(name=f"slice-{name}", uid=f"slice-{i}", resourceVersion="1")
            self.view.slices.apply("ADDED", piece)
        device_class = dradriver.device_class()
        device_class["metadata"].update(uid="class", resourceVersion="1")
        self.view.classes.apply("ADDED", device_class)
        self.free = [(n, f"gpu-{g}") for g in range(8) for n in self.names]  # spread, as kube-scheduler leaves them

    def bind(self, gang: int) -> None:
        """Gang `gang`'s pods bound and its claims allocated, as the watch delivers them."""
        for rank in range(GANG):
            name = f"gang-{gang:05d}-{rank}"
            node, device = self.free.pop()
            self.version += 1
            self.view.claims.apply("MODIFIED", claim(name, self.version, node, device))
            self.view.pods.apply("MODIFIED", pod(name, self.version, node))

    def group(self, gang: int) -> Group:
        members = tuple(
            Member(NAMESPACE, n, f"{n}-uid", requests=frozen_map({"cpu": 50}), claims=(f"{n}-gpu",))
            for n in (f"next-{gang:05d}-{r}" for r in range(GANG))
        )
        return Group(NAMESPACE, f"next-{gang}", GANG, members)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(measure(argv))


async def measure(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running", type=int, default=1000, help="gangs of 3 bound before the burst (default 1,000)")
    parser.add_argument("--gangs", type=int, default=50, help="gangs bound one by one, a snapshot after each (default 50)")
    args = parser.parse_args(argv)
    burst = Burst(args.nodes)
    for gang in range(args.running):
        burst.bind(gang)
    cache = burst.loop.cache
    started = time.perf_counter()
    await cache.snapshot()
    first = time.perf_counter() - started
    matcher = DeviceMatcher()
    snaps, plans = [], []
    for gang in range(args.running, args.running + args.gangs):
        burst.bind(gang)
        started = time.perf_counter()
        snapshot = await cache.snapshot()
        snaps.append(time.perf_counter() - started)
        group = burst.group(gang)
        claims = {
            c.key: c
            for m in group.members
            for c in [Claim(NAMESPACE, m.claims[0], f"{m.name}-c", (DeviceRequest("gpu", dradriver.DEVICE_CLASS),))]
        }
        snapshot = replace(snapshot, claims=frozen_map({**snapshot.claims, **claims}))
        started = time.perf_counter()
        result = plan(snapshot, group, matcher)
        plans.append(time.perf_counter() - started)
        if not isinstance(result, Fits):
            print(f"gang {gang} did not fit: {result.message}")
            return 1
    view = burst.view
    kept = await cache.snapshot()
    started = time.perf_counter()
    fresh = snapshots.build(view.nodes.items(), view.pods.items(), view.slices.items(), view.claims.items(), view.classes.items())
    scratch = time.perf_counter() - started
    await burst.kube.api.close()
    print(f"{args.nodes} nodes x 8 devices, {args.running} gangs of 3 running, {args.gangs} more bound one by one")
    print(f"first snapshot: {first * 1000:.0f} ms; one from scratch of the final state: {scratch * 1000:.0f} ms")
    print(f"snapshot after a gang bound: median {statistics.median(snaps) * 1000:.1f} ms, max {max(snaps) * 1000:.1f} ms")
    print(f"plan of a gang of 3 on it:   median {statistics.median(plans) * 1000:.1f} ms, max {max(plans) * 1000:.1f} ms")
    if (kept.nodes, sorted(kept.pods, key=str), kept.held) != (fresh.nodes, sorted(fresh.pods, key=str), fresh.held):
        print("the kept snapshot differs from one built from scratch of the same objects")
        return 1
    print("the kept snapshot equals one built from scratch, as expected")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
