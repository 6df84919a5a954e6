"""Two allocators, one pool: gangs reserved by Phalanx raced by non-gang DRA pods kube-scheduler places.

20 gangs of mixed sizes and 50 single-GPU pods are submitted at once on 10
nodes x 4 devices (100 GPUs asked, 40 exist). After the cluster settles:
no device is held by two claims, no gang has a member bound while another
waits, no waiting gang holds a device, and no waiting gang would fit. A
single pod that took a device Phalanx had reserved is evicted (and, being a
bare pod, stays gone). The run must have provoked the race (conflicts caught
> 0), or it proved nothing: a burst that did not is checked the same way,
then deleted and sent again, up to three times; the counts are printed.

Slices: dra-example-driver's plugin, one process per node, on a dedicated
cluster (10 plugins fit easily; the stand-in is for hundreds of nodes).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cluster_name

from jobs import one_gpu_pod_spec
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc

ROOT = Path(__file__).parents[2]
NAMESPACE = "race"
SIZES = [1, 2, 3, 4] * 5
SINGLES = 50
ROUNDS = 3
"""Bursts tried until one provokes the race (most do in the first)."""
CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}]}}},
}
POD_SPEC = one_gpu_pod_spec()


def _gang(index: int, size: int) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"gang-{index}", "namespace": NAMESPACE, "annotations": {"scheduling.phalanx.dev/min-count": str(size)}},
        "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "template": {"spec": POD_SPEC}},
    }


def _single(index: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"single-{index}", "namespace": NAMESPACE}, "spec": POD_SPEC}


@pytest.fixture(scope="module")
def race_cluster() -> Iterator[tuple[LocalCluster, operatorproc.OperatorProcess]]:
    if os.environ.get("PHALANX_E2E_KUBECONFIG"):
        pytest.skip("needs a dedicated local control plane of 10 nodes x 4 devices")
    local = LocalCluster(ClusterSpec(name=cluster_name("race"), workers=10, gpus_per_worker=4, driver="dra-example-driver"))
    try:
        local.up()
        operator = operatorproc.start(local, ROOT)
        try:
            yield local, operator
        finally:
            operator.stop()
            if os.environ.get("PHALANX_KEEP_LOGS"):
                print(f"race operator log: {operator.log}")
    finally:
        local.down()


def _state(local: LocalCluster) -> tuple[list[dict], list[dict]]:
    pods = json.loads(local.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    claims = json.loads(local.kubectl("get", "resourceclaims", "-A", "-o", "json").stdout)["items"]
    return pods, claims


def _fingerprint(pods: list[dict], claims: list[dict]) -> tuple:
    bound = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))
    held = sorted(c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("allocation"))
    return (len(pods), tuple(bound), tuple(held))


def test_gangs_and_single_pods_never_share_a_device(race_cluster) -> None:
    local, operator = race_cluster
    for round_ in range(1, ROUNDS + 1):
        summary = _round(local)
        conflicts = _metric(operator, "phalanx_reservation_conflicts_total{")
        if conflicts > 0 or round_ == ROUNDS:
            break
        local.kubectl("delete", "namespace", NAMESPACE, "--wait=true")  # no race yet: the same burst again
    evictions = _metric(operator, "phalanx_evictions_total{")
    assert conflicts > 0, f"no race happened in {ROUNDS} rounds: no device was caught held by a reservation and another claim"
    print(f"race: round {round_} of at most {ROUNDS}: {summary}, {conflicts:.0f} conflicts caught, {evictions:.0f} non-gang pods evicted")


def _metric(operator: operatorproc.OperatorProcess, prefix: str) -> float:
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics").read().decode()
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(prefix))


def _round(local: LocalCluster) -> str:
    """One burst of gangs and single pods, settled and checked; what it left, in words."""
    local.kubectl("create", "namespace", NAMESPACE)
    items: list[dict] = [CLAIM_TEMPLATE]
    for i in range(max(len(SIZES), SINGLES)):
        items += [_gang(i, SIZES[i])] if i < len(SIZES) else []
        items += [_single(i)] if i < SINGLES else []
    local.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    stable_since, last = time.monotonic(), None
    deadline = time.monotonic() + 240
    while True:
        pods, claims = _state(local)
        fingerprint = _fingerprint(pods, claims)
        if fingerprint != last:
            stable_since, last = time.monotonic(), fingerprint
        if len(pods) >= sum(SIZES) and time.monotonic() - stable_since > 8:
            break  # a single pod evicted to end a double allocation does not come back
        assert time.monotonic() < deadline, f"did not settle: {fingerprint[0]} pods"
        time.sleep(1)

    holders: dict[tuple, list[str]] = {}
    for claim in claims:
        for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            holders.setdefault((r["driver"], r["pool"], r["device"]), []).append(claim["metadata"]["name"])
    shared = {d: c for d, c in holders.items() if len(c) > 1}
    assert not shared, f"devices held by two claims: {shared}"

    allocated_claims = {c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("allocation")}
    waiting_sizes = []
    for index, size in enumerate(SIZES):
        members = [p for p in pods if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == f"gang-{index}"]
        bound = [p for p in members if p["spec"].get("nodeName")]
        assert len(bound) in (0, size), f"gang-{index}: {len(bound)} of {size} members bound"
        if not bound:
            waiting_sizes.append(size)
            held = [
                s["resourceClaimName"]
                for p in members
                for s in (p.get("status") or {}).get("resourceClaimStatuses") or []
                if s.get("resourceClaimName") in allocated_claims
            ]
            assert not held, f"waiting gang-{index} holds devices: {held}"
    free = 40 - len(holders)
    pending_singles = [p for p in pods if p["metadata"]["name"].startswith("single-") and not p["spec"].get("nodeName")]
    pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if waiting_sizes:
        assert free < min(waiting_sizes), f"{free} devices free but a gang of {min(waiting_sizes)} still waits"
    assert free == 0 or not pending_singles, f"{free} devices free while {len(pending_singles)} single pods wait"

    running_gangs = len(SIZES) - len(waiting_sizes)
    return (
        f"{running_gangs}/{len(SIZES)} gangs running, {len(pods)} pods, {len(holders)}/40 devices held, "
        f"sizes waiting {dict(Counter(waiting_sizes))}"
    )
