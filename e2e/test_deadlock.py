"""The article's Example 1, with Phalanx NOT running: the deadlock a user sees today.

Slices: dra-example-driver's: its plugin on the local control plane, its DaemonSet on Kind.
"""

from __future__ import annotations

from collections import Counter

from conftest import WORKLOADS, Cluster

from phalanx_dev.localcluster import demo

RANKS = 4


def test_two_jobs_deadlock_on_six_gpus_without_gang_scheduling(cluster: Cluster, namespace: str) -> None:
    devices_total = sum(len(s["spec"]["devices"]) for s in cluster.get("resourceslices")["items"])
    assert devices_total == 6, "the article's cluster: 3 workers x 2 GPUs"

    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml", "train-a.yaml", "train-b.yaml"], namespace)
    demo.settle(cluster.kubectl, namespace, pods_expected=2 * RANKS)

    claims = cluster.get("resourceclaims", "-n", namespace)["items"]
    allocated = [c for c in claims if c.get("status", {}).get("allocation")]
    devices = [(r["driver"], r["pool"], r["device"]) for c in allocated for r in c["status"]["allocation"]["devices"]["results"]]
    assert len(devices) == devices_total, f"every GPU is held: {len(devices)}/{devices_total}"
    assert len(set(devices)) == len(devices), "no device is allocated twice"

    pods = cluster.get("pods", "-n", namespace)["items"]
    pending = [p for p in pods if p["status"]["phase"] == "Pending"]
    running = [p for p in pods if p["status"]["phase"] == "Running"]
    assert (len(running), len(pending)) == (devices_total, 2 * RANKS - devices_total)
    for pod in pending:
        assert "nodeName" not in pod["spec"]
        (scheduled,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert "cannot allocate all claims" in scheduled["message"], scheduled["message"]
        assert "1 node(s) had untolerated taint" in scheduled["message"], scheduled["message"]

    ranks = Counter(p["metadata"]["labels"]["batch.kubernetes.io/job-name"] for p in running)
    stuck = [job for job in ("train-a", "train-b") if 0 < ranks[job] < RANKS]
    assert stuck, f"some Job holds GPUs without all {RANKS} ranks running: {dict(ranks)}"
    assert sum(1 for job in ("train-a", "train-b") if ranks[job] == RANKS) <= 1
