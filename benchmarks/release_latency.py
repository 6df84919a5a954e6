"""Release latency on the local control plane: from quorum present to every member bound.

A standalone script, not a test: it prints numbers and asserts nothing about
time. One cluster (workers x 8 fake GPUs, enough for the largest gang), the
operator run as in the tests (its ServiceAccount, its webhooks), and for each
gang size, several runs of the same Job:

  quorum->bound   from the moment every member exists with its claims (the
                  earliest Phalanx can act) to the moment every member has a
                  node, both seen through one watch on the namespace;
  create->bound   from `kubectl apply` of the Job to every member bound;
  vanilla         the same Job without gang annotations (kube-scheduler alone),
                  create->bound, for scale.

The slices come from the `fakegpu` stand-in (`--driver` to change it): the
same shape as dra-example-driver's, without 16 plugin processes competing
with the operator for a small machine's cores while it is timed.

Run it with whichever checkout's Python is first: `.venv/bin/python
benchmarks/release_latency.py` measures that checkout's operator, so two
checkouts give a before/after pair on the same machine.

Usage: python benchmarks/release_latency.py [--sizes 4,32,128] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from pathlib import Path

from kubernetes_asyncio import client, config, watch

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc

ROOT = Path(__file__).parents[1]
GPUS_PER_WORKER = 8


def job(name: str, size: int, gang: bool) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {"scheduling.phalanx.dev/min-count": str(size)} if gang else {}},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
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
                }
            },
        },
    }


CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]}}},
}


async def one_run(local: LocalCluster, api: client.ApiClient, namespace: str, size: int, gang: bool) -> tuple[float, float]:
    """(quorum->bound, create->bound) in seconds, from one watch."""
    core = client.CoreV1Api(api)
    pods: dict[str, dict] = {}
    quorum_at = bound_at = None
    started = time.monotonic()
    local.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job("bench", size, gang)))
    async with watch.Watch() as stream:
        async for event in stream.stream(core.list_namespaced_pod, namespace, timeout_seconds=300, _request_timeout=310):
            pod = event["raw_object"]
            if event["type"] == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
                continue
            pods[pod["metadata"]["name"]] = pod
            now = time.monotonic()
            if quorum_at is None and len(pods) >= size and all((p.get("status") or {}).get("resourceClaimStatuses") for p in pods.values()):
                quorum_at = now
            if len(pods) >= size and all(p["spec"].get("nodeName") for p in pods.values()):
                bound_at = now
                break
    if bound_at is None:
        raise RuntimeError(f"{size} pods not bound within 300 s")
    quorum_at = quorum_at if quorum_at is not None else bound_at  # vanilla pods can bind before their claim status shows
    local.kubectl("delete", "job", "bench", "-n", namespace, "--cascade=foreground", "--wait=true")
    deadline = time.monotonic() + 120
    while local.kubectl("get", "pods,resourceclaims", "-n", namespace, "-o", "name").stdout.strip():
        if time.monotonic() > deadline:
            raise RuntimeError("the previous run's pods did not go away")
        await asyncio.sleep(0.3)
    return bound_at - quorum_at, bound_at - started


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


async def measure(local: LocalCluster, sizes: list[int], runs: int) -> list[tuple[int, list[float], list[float], list[float]]]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(local.kubeconfig), client_configuration=configuration)
    rows = []
    async with client.ApiClient(configuration) as api:
        for size in sizes:
            gang = [await one_run(local, api, "bench", size, True) for _ in range(runs)]
            vanilla = [await one_run(local, api, "bench", size, False) for _ in range(runs)]
            rows.append((size, [q for q, _ in gang], [c for _, c in gang], [c for _, c in vanilla]))
            print(f"size {size}: gang {gang}, vanilla {vanilla}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4,32,128")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--name", default="phalanx-bench")
    parser.add_argument("--driver", choices=["dra-example-driver", "fakegpu"], default="fakegpu", help="who publishes the ResourceSlices")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose CRDs and RBAC to install (default: this one)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    workers = math.ceil(max(sizes) / GPUS_PER_WORKER)
    local = LocalCluster(ClusterSpec(name=args.name, workers=workers, gpus_per_worker=GPUS_PER_WORKER, driver=args.driver))
    local.up()
    operator = None
    try:
        operator = operatorproc.start(local, args.repo)
        local.kubectl("create", "namespace", "bench")
        local.kubectl("apply", "-n", "bench", "-f", "-", stdin=json.dumps(CLAIM_TEMPLATE))
        rows = asyncio.run(measure(local, sizes, args.runs))
        print(f"release latency, median of {args.runs} runs, seconds ({local.spec.workers} workers x {GPUS_PER_WORKER} GPUs)")
        print("| ranks | Phalanx quorum->bound | Phalanx create->bound | vanilla create->bound | ratio |")
        print("|---|---|---|---|---|")
        for size, quorum, created, vanilla in rows:
            ratio = statistics.median(created) / statistics.median(vanilla)
            print(f"| {size} | {median(quorum)} | {median(created)} | {median(vanilla)} | {ratio:.2f}x |")
    finally:
        if operator is not None:
            operator.stop()
        local.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
