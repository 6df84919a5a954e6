"""Crash consistency: the operator is SIGKILLed at a named step of a reservation, a preemption or a teardown, restarted,
and once the cluster settles nothing is leaked, nothing is half released, and every gang that fits runs.

Each run arms one crash point (`phalanx.crashpoints`, PHALANX_CRASH_AT) in a fresh operator, drives the scenario
that reaches it, proves the operator died there (its exit by SIGKILL and the point's own log line), starts a clean
operator and judges the settled cluster with `faultcheck.violations`; every snapshot from the scenario's start to the settled
end is judged as it is taken too (`faultcheck.Continuous`: no device held twice, no running pod without its devices). The short form (`./task test`) crashes once,
mid-reservation; PHALANX_FAULT_RUNS=N (`./task faults` sets 50) cycles N runs over every point, the
points inside a concurrent step (a claim written, a gate lifted, a pod evicted) at their 1st, 2nd and 3rd hit.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import WORKLOADS, Cluster, wait_for

import faultcheck
from jobs import gpu_gang
from phalanx.crashpoints import ENV
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
LOW, URGENT = "fault-low", "fault-urgent"
SCENARIO = {
    "reserve.after-record": "release",
    "reserve.mid-claims": "release",
    "reserve.after-claims": "release",
    "reserve.mid-gates": "release",
    "reserve.after-gates": "release",
    "nomination.after-record": "preempt",
    "nomination.after-taints": "preempt",
    "evicted.PreemptedByGang": "preempt",
    "evicted.GangDisrupted": "disrupt",
    "teardown.after-evictions": "disrupt",
    "member.after-claims": "late",
}
CONCURRENT = ("reserve.mid-claims", "reserve.mid-gates", "evicted.PreemptedByGang", "evicted.GangDisrupted")
SHORT = ["reserve.mid-claims"]


def runs() -> list[str]:
    """The crash targets (`point` or `point:N`), one per run."""
    count = int(os.environ.get("PHALANX_FAULT_RUNS", "0"))
    if count <= 0:
        return SHORT
    points = list(SCENARIO)
    out = []
    for i in range(max(count, len(points))):
        point = points[i % len(points)]
        nth = 1 + (i // len(points)) % 3
        out.append(f"{point}:{nth}" if point in CONCURRENT and nth > 1 else point)
    return out


@pytest.fixture
def operators(cluster: Cluster) -> Iterator[list[operatorproc.OperatorProcess]]:
    if cluster.local is None:
        pytest.skip("kills and restarts the operator process")
    started: list[operatorproc.OperatorProcess] = []
    yield started
    for handle in started:
        handle.stop()
        if not os.environ.get("PHALANX_KEEP_LOGS"):
            handle.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def priorities(cluster: Cluster) -> Iterator[None]:
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": LOW}, "value": 100},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": URGENT}, "value": 10000},
    ]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": classes}))
    yield
    cluster.kubectl("delete", "priorityclass", LOW, URGENT, check=False)


def apply(cluster: Cluster, namespace: str, job: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))


def drive(cluster: Cluster, namespace: str, scenario: str) -> dict[str, int]:
    """Start what reaches the armed point; returns how many members of each Job must be bound once settled.

    release: a gang of 4 on 6 free GPUs. preempt: a low-priority gang of 4 runs, an urgent one of 4 arrives.
    disrupt: a member of a running gang in disruptionMode all is deleted. late: the same in disruptionMode single,
    so the Job's replacement is released alone, as a late member.
    """
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    if scenario == "release":
        apply(cluster, namespace, gpu_gang("gang", 4, mode="all"))
        return {"gang": 4}
    if scenario == "preempt":
        apply(cluster, namespace, gpu_gang("low", 4, mode="all", priority_class=LOW))
        wait_for(
            lambda: faultcheck.bound(faultcheck.take(cluster.kubectl, namespace), "low") == 4, "the low-priority gang running", timeout=120
        )
        apply(cluster, namespace, gpu_gang("urgent", 4, mode="all", priority_class=URGENT))
        return {"urgent": 4, "low": 0}
    apply(cluster, namespace, gpu_gang("gang", 4, mode="single" if scenario == "late" else "all"))
    snapshot = wait_for(
        lambda: (s := faultcheck.take(cluster.kubectl, namespace)) and faultcheck.bound(s, "gang") == 4 and s,
        "the gang running",
        timeout=120,
    )
    member = sorted(p["metadata"]["name"] for p in snapshot.pods if p["spec"].get("nodeName"))[0]
    cluster.kubectl("delete", "pod", member, "-n", namespace, "--wait=false")
    return {"gang": 4}


@pytest.mark.parametrize("target", runs(), ids=lambda t: t.replace(":", "-hit"))
def test_a_crash_at_any_step_leaves_nothing_leaked_or_half_released(
    cluster: Cluster, operators: list, priorities: None, namespace: str, target: str
) -> None:
    point = target.partition(":")[0]
    armed = operatorproc.start(cluster.local, ROOT, env={ENV: target})
    operators.append(armed)
    expect = drive(cluster, namespace, SCENARIO[point])
    continuous = faultcheck.Continuous()

    def killed() -> bool:
        wrong = continuous.check(faultcheck.take(cluster.kubectl, namespace))
        assert not wrong, f"before the crash at {target}: {wrong}"
        return armed.process.poll() is not None

    wait_for(killed, f"the operator killed at {target}", timeout=180)
    assert armed.process.returncode == -signal.SIGKILL, armed.logs()[-4000:]
    assert f"crash point {point} hit" in armed.logs(), "it died at the armed point: the scenario happened"

    operators.append(operatorproc.start(cluster.local, ROOT))
    snapshot = faultcheck.settle(cluster, namespace, expect, continuous=continuous)
    print(f"{target}: {continuous.snapshots} snapshots judged as taken")
    problems = faultcheck.violations(snapshot)
    assert not problems, f"after a crash at {target}: {problems}\n{faultcheck.summary(snapshot)}"
