"""Waiting gangs a cycle passes over (`scheduling/hints.py`), on the local control plane: they are passed over while
no write marks them, and still get the room that appears for them.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
from typing import Any

from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import bound_pods, gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import demo

POOL = "phalanx-test/quiet-pool"


def _counter(operator: Operator, name: str = "phalanx_groups_passed_over_total") -> float:
    assert operator.handle is not None
    return operator.handle.metric(name)


def _reasons(cluster: Cluster, namespace: str) -> dict[str, str]:
    out = {}
    for group in cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]:
        conditions = (group.get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c["type"] == keys.INITIALLY_SCHEDULED), {})
        out[group["metadata"]["labels"][keys.JOB_NAME_LABEL]] = found.get("reason", "")
    return out


def _gang(name: str) -> dict[str, Any]:
    job = gpu_gang(name, 2)
    job["spec"]["template"]["spec"]["nodeSelector"] = {POOL: "yes"}
    return job


def test_waiting_gangs_are_passed_over_until_room_appears_and_then_the_first_in_line_gets_it(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """Three gangs of 2 that no node can take (a node label none has) wait Unschedulable; later cycles pass them over
    (the counter moves by at least one visit each, the scenario happened). Then one worker (2 GPUs) gets the label: a
    node changed, capacity none of them could use before. The oldest gang is released onto it, the other two still
    wait."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    names = ["quiet-a", "quiet-b", "quiet-c"]
    for name in names:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_gang(name)))
    wait_for(lambda: set(_reasons(cluster, namespace).values()) == {"Unschedulable"} and len(_reasons(cluster, namespace)) == 3, "all wait")
    before = _counter(operator)
    wait_for(lambda: _counter(operator) >= before + len(names), "the waiting gangs passed over", timeout=30)
    worker = "worker-3"
    cluster.kubectl("label", "node", worker, f"{POOL}=yes")
    try:
        pods = bound_pods(cluster, namespace, "quiet-a", 2, timeout=60)
        assert {p["spec"]["nodeName"] for p in pods} == {worker}
        reasons = _reasons(cluster, namespace)
        assert reasons["quiet-b"] == reasons["quiet-c"] == "Unschedulable", reasons
    finally:
        cluster.kubectl("label", "node", worker, f"{POOL}-")
