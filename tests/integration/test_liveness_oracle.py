"""The liveness oracle (`liveness.py`) against real objects: it names a forgotten gang, and stays quiet when the operator
does its job.

A forgotten gang is staged with the real operator: two gangs of two GPUs ask for a node label no node has, so the loop
finds both Unschedulable; then the operator is stopped, as if its wake-up for the change to come were lost, and one
worker (two GPUs) gets the label. Both gangs now fit alone, not together, and nobody acts. The oracle, told to take an
operator as leading, names the older gang after the bound, never the one behind it (it could use the same room); told
the truth (the Lease: nobody leads), it names nothing at once. An operator started again releases the older gang
while the oracle watches, and the oracle names nothing: the gang behind it waits with no room.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, wait_for

import liveness
from jobs import bound_pods, gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
POOL = "phalanx-test/liveness-pool"
WORKER = "worker-3"
BOUND = 8.0
"""A bound of the test's own, shorter than the suite's: the staged gang fits and waits for good, so any bound shows it."""


@pytest.fixture
def operators(cluster: Cluster) -> Iterator[list[operatorproc.OperatorProcess]]:
    """The operators the test starts, stopped at its end (after the namespace is emptied: requested before it)."""
    if cluster.local is None:
        pytest.skip("stops and starts the operator process")
    started: list[operatorproc.OperatorProcess] = [operatorproc.start(cluster.local, ROOT)]
    try:
        yield started
    finally:
        for handle in started:
            handle.stop()
            handle.log.unlink(missing_ok=True)


def _gang(name: str) -> dict[str, Any]:
    job = gpu_gang(name, 2)
    job["spec"]["template"]["spec"]["nodeSelector"] = {POOL: "yes"}
    return job


def _reason(cluster: Cluster, namespace: str, job: str) -> str:
    for group in cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]:
        if group["metadata"]["labels"].get(keys.JOB_NAME_LABEL) == job:
            found = [c for c in (group.get("status") or {}).get("conditions") or [] if c["type"] == keys.INITIALLY_SCHEDULED]
            return str(found[0]["reason"]) if found else ""
    return ""


def test_a_gang_left_fitting_while_no_operator_acts_is_named_and_released_once_one_does(
    cluster: Cluster, operators: list[operatorproc.OperatorProcess], namespace: str
) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    for name in ("first", "second"):  # created in this order: the first is older, ahead in the queue
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_gang(name)))
    wait_for(
        lambda: _reason(cluster, namespace, "first") == _reason(cluster, namespace, "second") == "Unschedulable",
        "both gangs found Unschedulable",
    )
    assert liveness.judge(cluster.kubectl).findings == [], "no room yet: nothing fits"

    operators[0].stop()
    cluster.kubectl("label", "node", WORKER, f"{POOL}=yes")
    try:
        unled = liveness.judge(cluster.kubectl)
        assert unled.findings == [] and unled.observations == 1, "nobody leads: judged on nothing, at once"

        def as_if_led() -> liveness.Objects:
            return replace(liveness.take(cluster.kubectl), leases=None)

        forgotten = liveness.judge(cluster.kubectl, bound=BOUND, reads=as_if_led)
        assert [f.waiter.name for f in forgotten.findings] == [pg_name(cluster, namespace, "first")], forgotten.findings
        finding = forgotten.findings[0]
        assert finding.waited >= BOUND and finding.observations >= 2
        assert {node for _, node in finding.waiter.placements} == {WORKER}
        assert finding.waiter.condition.startswith("Unschedulable"), "what the last cycle before the stop wrote"
        assert "all 2 of 2 members fit" in str(finding), str(finding)

        operators.append(operatorproc.start(cluster.local, ROOT))  # type: ignore[arg-type]
        watched = liveness.judge(cluster.kubectl)
        assert watched.findings == [], watched.findings
        pods = bound_pods(cluster, namespace, "first", 2, timeout=60)
        assert {p["spec"]["nodeName"] for p in pods} == {WORKER}
        assert _reason(cluster, namespace, "second") != "Scheduled"
        assert liveness.judge(cluster.kubectl).findings == [], "the gang behind has no room: it waits rightly"
    finally:
        cluster.kubectl("label", "node", WORKER, f"{POOL}-")


def pg_name(cluster: Cluster, namespace: str, job: str) -> str:
    """The PodGroup the Job controller made for `job`."""
    for group in cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]:
        if group["metadata"]["labels"].get(keys.JOB_NAME_LABEL) == job:
            return str(group["metadata"]["name"])
    raise AssertionError(f"no PodGroup for {job}")
