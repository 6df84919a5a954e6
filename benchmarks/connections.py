"""Why the operator's request client keeps a small pool: concurrent writes, cold and warm, by pool size.

A standalone script, not a test: it prints numbers and asserts nothing about
time. A release writes one object per member at once (a claim each, then a pod
each). Every write beyond the pool's open connections opens a new TLS
connection, which costs both the operator and the API server a handshake. This
starts a local control plane without the operator and, for each pool size,
patches N ConfigMaps at once through a fresh client (cold: every connection
new) and again through the same client (warm), median of --runs.

Usage: python benchmarks/connections.py [--writes 32] [--pools 4,8,16,100] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time

from kubernetes_asyncio import client, config

from phalanx.kube.client import Conflict, Kube, all_answered
from phalanx_dev.localcluster import ClusterSpec, LocalCluster

NAMESPACE = "default"


async def _client(kubeconfig: str, pool: int) -> client.ApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


async def _burst(kube: Kube, writes: int) -> float:
    started = time.monotonic()
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    await all_answered(kube.merge_patch(f"{path}/bench-{i}", {"data": {"at": str(time.time())}}) for i in range(writes))
    return time.monotonic() - started


async def measure(kubeconfig: str, writes: int, pools: list[int], runs: int) -> list[tuple[int, float, float]]:
    async with await _client(kubeconfig, 100) as api:
        kube = Kube(api)
        for i in range(writes):
            with contextlib.suppress(Conflict):
                await kube.create(f"/api/v1/namespaces/{NAMESPACE}/configmaps", {"metadata": {"name": f"bench-{i}"}})
    rows = []
    for pool in pools:
        cold, warm = [], []
        for _ in range(runs):
            async with await _client(kubeconfig, pool) as api:
                cold.append(await _burst(Kube(api), writes))
                warm.append(await _burst(Kube(api), writes))
        rows.append((pool, statistics.median(cold), statistics.median(warm)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=32, help="concurrent writes per burst (default 32)")
    parser.add_argument("--pools", default="4,8,16,100", help="pool sizes (default 4,8,16,100; 100 is the library's default)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--name", default="phalanx-connections")
    args = parser.parse_args()
    local = LocalCluster(ClusterSpec(name=args.name, workers=1, gpus_per_worker=1, driver="fakegpu"))
    local.up()
    try:
        rows = asyncio.run(measure(str(local.kubeconfig), args.writes, [int(p) for p in args.pools.split(",")], args.runs))
    finally:
        local.down()
    print(f"{args.writes} concurrent ConfigMap patches, median of {args.runs} runs, ms")
    print("| pool | cold (new connections) | warm (reused) |")
    print("|---|---|---|")
    for pool, cold, warm in rows:
        print(f"| {pool} | {cold * 1000:.0f} | {warm * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
