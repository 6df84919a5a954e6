"""The head gang's wait under a stream of 1-GPU pods, with and without the hold (`./task bench -- --workloads starvation`).

A stream of plain pods, one device each, keeps every device of the Phalanx cluster busy: each runs a seeded random
10-30 s and is then deleted (grace 0), and `BACKLOG` more always wait, so a device that frees is wanted at once. Once
every device is busy, one gang of `size` ranks (1 device each) is submitted, at the head of the line. Measured: from
its submission to every rank bound (None: not within the limit), and how many pods of the stream started meanwhile
(backfill). Run twice on the same cluster, the same seed:

  hold      the gang's `scheduling.phalanx.dev/hold-after` is `HOLD_AFTER` s: past it, the devices its plan needs are
            held for it as they free;
  no hold   hold-after `0` (never): today's behaviour without the hold, where every freed device goes to a waiting
            pod and the gang waits until the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client

HOLD_AFTER = 10
BACKLOG = 16
RUN_FOR = (10.0, 30.0)
STREAM = "bench-stream"


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {STREAM: "yes"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [
                {
                    "name": "work",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m"}, "claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


async def starvation_run(
    way: Any,
    submit: Callable[[str, int, dict[str, str]], Awaitable[None]],
    size: int,
    devices: int,
    hold_after: int,
    limit: float,
    seed: int,
) -> dict[str, float | None]:
    """One run on `way` (three_way's Phalanx Way: its API client, pod watch and namespace; `devices` in all); `submit`
    creates the gang's Job with these annotations. See the module's docstring."""
    core = client.CoreV1Api(way.api)
    rng = random.Random(seed)
    name = f"head-{size}-{hold_after}"
    ends: dict[str, float] = {}
    gone: set[str] = set()
    created = 0
    submitted: float | None = None
    started_meanwhile: set[str] = set()
    before: set[str] = set()
    waited: float | None = None
    filled_at = time.monotonic()

    async def delete(pod: str) -> None:
        with contextlib.suppress(client.ApiException):
            await core.delete_namespaced_pod(pod, way.namespace, grace_period_seconds=0)

    try:
        while True:
            now = time.monotonic()
            stream = [p for p in way.pods.store.values() if (p["metadata"].get("labels") or {}).get(STREAM)]
            running = [p for p in stream if p["spec"].get("nodeName") and p["metadata"]["name"] not in gone]
            waiting = [p for p in stream if not p["spec"].get("nodeName") and p["metadata"]["name"] not in gone]
            ending = []
            for pod in running:
                pod_name = pod["metadata"]["name"]
                ends.setdefault(pod_name, now + rng.uniform(*RUN_FOR))
                if submitted is not None and pod_name not in before:
                    started_meanwhile.add(pod_name)
                if now >= ends[pod_name]:
                    gone.add(pod_name)
                    ending.append(delete(pod_name))
            more = []
            for _ in range(max(0, BACKLOG - len(waiting))):
                more.append(core.create_namespaced_pod(way.namespace, _pod(f"s-{created:05d}")))
                created += 1
            await asyncio.gather(*ending, *more)
            if submitted is None and len(running) >= devices:
                await submit(name, size, {"scheduling.phalanx.dev/hold-after": str(hold_after)})
                submitted = time.monotonic()
                before = {p["metadata"]["name"] for p in running}
            elif submitted is None and now - filled_at > limit:
                raise RuntimeError(f"the stream did not fill the {devices} devices in {limit:.0f}s")
            if submitted is not None:
                gang = way.pods.of(name)
                if len(gang) >= size and all(p["spec"].get("nodeName") for p in gang):
                    waited = time.monotonic() - submitted
                    break
                if time.monotonic() - submitted > limit:
                    break
            await asyncio.sleep(0.2)
    finally:
        await way.finish(name)
        await core.delete_collection_namespaced_pod(way.namespace, label_selector=STREAM, grace_period_seconds=0)
        await way.drained()
    return {"wait": waited, "limit": limit, "stream_started_meanwhile": float(len(started_meanwhile)), "stream_created": float(created)}


def table(size: int, devices: int, runs: dict[str, dict[str, float | None]]) -> list[str]:
    lines = [
        "",
        f"starvation: a {size}-rank gang submitted once a stream of 1-GPU pods (each {RUN_FOR[0]:.0f}-{RUN_FOR[1]:.0f} s, "
        f"{BACKLOG} always waiting) holds all {devices} devices; seconds from its submission to every rank bound",
        "| hold | head gang's wait | stream pods started meanwhile (backfill) |",
        "|---|---|---|",
    ]
    for label, sample in runs.items():
        wait = sample["wait"]
        shown = f"{wait:.1f} s" if wait is not None else f"not bound in {sample['limit']:.0f} s"
        lines.append(f"| {label} | {shown} | {sample['stream_started_meanwhile']:.0f} |")
    return lines
