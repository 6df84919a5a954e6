"""The operator's resident memory in a large cluster: 1,000 nodes, 10,000 pods, 2,000 ResourceClaims.

A standalone script, not a test: it prints numbers and asserts nothing. One
local control plane with 1,000 kwok workers (ResourceSlices from the
`fakegpu` stand-in, 2 GPUs each), the operator run as in the tests (its
ServiceAccount, its webhooks), and then, through the API:

* 2,000 ResourceClaims (one GPU each, unallocated);
* 10,000 pods shaped like real workloads (env, volumes, labels, requests):
  half bound to kwok nodes by `spec.nodeName` (kwok runs them: they get a
  full status), half held by a scheduling gate of nobody's, 2,000 of those
  using one claim each.

RSS (VmRSS) and its peak (VmHWM) are read from /proc before the objects are
created and once the operator's memory has settled after them.

Usage: python benchmarks/operator_rss.py [--name rss] [--pods 10000] [--claims 2000] [--nodes 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc
from phalanx_dev.localcluster.dradriver import DEVICE_CLASS
from phalanx_dev.localcluster.fakegpu import worker_names

ROOT = Path(__file__).parents[1]
NAMESPACE = "rss"


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def claim(i: int) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{i}", "labels": {"bench": "rss"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}},
    }


def pod(i: int, nodes: list[str], claims: int) -> dict:
    bound = i % 2 == 0
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "worker",
                "image": "registry.example.com/team/trainer:2026.11",
                "command": ["python", "-m", "trainer", "--config", "/etc/trainer/config.yaml"],
                "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-{i}"} for k in range(12)],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/trainer"}, {"name": "data", "mountPath": "/data"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
            }
        ],
        "volumes": [{"name": "config", "configMap": {"name": "trainer"}}, {"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if bound:
        spec["nodeName"] = nodes[i % len(nodes)]
    else:
        spec["schedulingGates"] = [{"name": "example.com/held"}]
        if i // 2 < claims:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{i // 2}"}]
            spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i}",
            "labels": {"bench": "rss", "app": f"app-{i % 50}", "team": f"team-{i % 7}"},
            "annotations": {"example.com/owner": f"owner-{i % 13}"},
        },
        "spec": spec,
    }


async def create_all(api: client.ApiClient, bodies: list[dict], create, what: str, concurrency: int = 16) -> None:  # type: ignore[no-untyped-def]
    queue = list(reversed(bodies))
    started = time.monotonic()

    async def worker() -> None:
        while queue:
            body = queue.pop()
            for attempt in range(5):
                try:
                    await create(NAMESPACE, body)
                    break
                except ApiException as exc:
                    if exc.status == 409:
                        break
                    if attempt == 4:
                        raise
                    await asyncio.sleep(1)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    print(f"  {len(bodies)} {what} created in {time.monotonic() - started:.0f}s", flush=True)


async def populate(local: LocalCluster, pods: int, claims: int) -> None:
    async with await local.api_client() as api:
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        try:
            await core.create_namespace({"metadata": {"name": NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        nodes = worker_names(local.spec.workers)
        await create_all(api, [claim(i) for i in range(claims)], resource.create_namespaced_resource_claim, "claims")
        await create_all(api, [pod(i, nodes, claims) for i in range(pods)], core.create_namespaced_pod, "pods")


def settle(pid: int, period: float = 10.0, rounds: int = 30) -> tuple[float, float]:
    """Sample until two samples in a row differ by less than 2 MiB (the informers caught up)."""
    last = memory(pid)[0]
    for _ in range(rounds):
        time.sleep(period)
        now = memory(pid)
        print(f"  RSS {now[0]:.0f} MiB (peak {now[1]:.0f} MiB)", flush=True)
        if abs(now[0] - last) < 2:
            return now
        last = now[0]
    return memory(pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="rss", help="local cluster name (default rss)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    local = LocalCluster(ClusterSpec(name=args.name, workers=args.nodes, gpus_per_worker=2, driver="fakegpu"))
    started = time.monotonic()
    local.up()
    print(f"cluster with {args.nodes} kwok workers up in {time.monotonic() - started:.0f}s", flush=True)
    operator = None
    try:
        operator = operatorproc.start(local, ROOT)
        pid = operator.process.pid
        before = settle(pid, period=3.0, rounds=5)
        print(f"operator RSS with {args.nodes} nodes and their slices, before pods and claims: {before[0]:.0f} MiB", flush=True)
        asyncio.run(populate(local, args.pods, args.claims))
        after = settle(pid)
        print(
            f"operator RSS with {args.nodes} nodes, {args.pods} pods, {args.claims} claims: {after[0]:.0f} MiB "
            f"(peak {after[1]:.0f} MiB; before the pods and claims {before[0]:.0f} MiB)",
            flush=True,
        )
    finally:
        if operator is not None:
            operator.stop()
            operator.log.unlink(missing_ok=True)
        local.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
