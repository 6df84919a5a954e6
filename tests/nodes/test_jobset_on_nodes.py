"""On real nodes, a gang JobSet: JobSet's controller makes the Jobs, Phalanx places the whole gang, the kubelets run it.

`./task test:nodes` starts the cluster with JobSet's controller (`phalanx
cluster up --jobset`) beside the deployed operator.
"""

from __future__ import annotations

import json

from conftest import WORKLOADS, Cluster, wait_for

from jobs import gpu_jobset
from phalanx.api import keys
from phalanx_dev.localcluster import demo

REAL_NODE = "phalanx.dev/real-node"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def test_a_gang_jobset_runs_whole_on_real_kubelets_each_rank_with_its_device(cluster: Cluster, namespace: str) -> None:
    real = {n["metadata"]["name"] for n in cluster.get("nodes")["items"] if (n["metadata"].get("labels") or {}).get(REAL_NODE) == "true"}
    assert len(real) == 3, f"real nodes: {real}; run ./task test:nodes"
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    body = gpu_jobset("train", 3, {keys.POLICY: "gang"})
    for rjob in body["spec"]["replicatedJobs"]:
        rank = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
        rank["command"] = ["sh", "-c", 'echo "holding $(env | sed -n "s/^GPU_DEVICE_[0-9]*=//p")"; exec sleep 3600']
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(body))

    def running() -> list[dict] | None:
        pods = cluster.get("-n", namespace, "pods", "-l", f"{JOBSET_NAME}=train")["items"]
        up = [p for p in pods if p["status"].get("phase") == "Running"]
        return up if len(up) == 4 else None

    members = wait_for(running, "the JobSet's 4 containers running", timeout=180)
    assert {p["spec"]["nodeName"] for p in members} <= real
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in members), "placed by Phalanx"
    devices = set()
    for pod in members:
        name = pod["metadata"]["name"]
        log = wait_for(lambda n=name: cluster.kubectl("logs", n, "-n", namespace, check=False).stdout.strip(), f"{name}'s log")
        claim = next(s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"] if s["name"] == "gpu")
        (result,) = cluster.get("resourceclaim", claim, "-n", namespace)["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == pod["spec"]["nodeName"]
        assert log == f"holding {result['device']}", f"{name}: {log}"
        devices.add((result["pool"], result["device"]))
    assert len(devices) == 4, f"four ranks, four devices: {devices}"
