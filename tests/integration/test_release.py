"""The release loop on the local control plane: late members, and what a held gang holds.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json

from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import one_gpu_pod_spec
from phalanx_dev.localcluster import demo


def _job(name: str, size: int, mode: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "annotations": {"scheduling.phalanx.dev/min-count": str(size), "scheduling.phalanx.dev/disruption-mode": mode},
        },
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 3,
            "template": {"spec": one_gpu_pod_spec()},
        },
    }


def _running(cluster: Cluster, namespace: str) -> list[dict]:
    pods = cluster.get("pods", "-n", namespace)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def test_a_replacement_member_of_a_scheduled_gang_is_released_alone(cluster: Cluster, operator: Operator, namespace: str) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_job("elastic", 2, "single")))

    def both_running() -> list[dict] | None:
        running = _running(cluster, namespace)
        return running if len(running) == 2 else None

    first = wait_for(both_running, "2 members running")
    victim = first[0]["metadata"]["name"]
    cluster.kubectl("annotate", "pod", victim, "-n", namespace, "localcluster.phalanx.dev/exit=1")

    def replaced() -> list[dict] | None:
        running = _running(cluster, namespace)
        names = {p["metadata"]["name"] for p in running}
        return running if len(running) == 2 and victim not in names else None

    running = wait_for(replaced, "the failed rank replaced and released")
    replacement = next(p for p in running if p["metadata"]["name"] != first[1]["metadata"]["name"])
    assert replacement["metadata"]["annotations"]["scheduling.phalanx.dev/node"] == replacement["spec"]["nodeName"]
    events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.kind=PodGroup")["items"]
    assert [e["reason"] for e in events].count("Released") == 1, "the group itself was released once"
