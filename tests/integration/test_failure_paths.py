"""The failure paths, with pods that take their grace period to stop, as on a kubelet: nothing stranded, nothing
handed out while still in use.

Each test stages one path the happy-path suites never reach and proves it happened (a pod seen stopping, an
eviction seen refused) before it judges the outcome. Slices: the session cluster's, from dra-example-driver's
plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

import faultcheck
import flakyapi
from jobs import gpu_gang
from phalanx.api import keys
from phalanx.localcluster import demo


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"]


def _stopping(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deleted, and still running out their grace period."""
    return [p for p in _running(pods) if p["metadata"].get("deletionTimestamp")]


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _reason(pod_group: dict[str, Any]) -> str | None:
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED:
            return cond["reason"]
    return None


def _start(cluster: Cluster, namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    name, size = job["metadata"]["name"], job["spec"]["parallelism"]
    return wait_for(lambda: len(r := _running(_pods(cluster, namespace, name))) == size and r, f"{name}: {size} members running")


def _watch(cluster: Cluster, namespace: str, seconds: float, continuous: faultcheck.Continuous) -> list[faultcheck.Snapshot]:
    """Snapshots of the namespace for `seconds`, each judged as it is taken; fails at the first violation."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        snapshot = faultcheck.take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot)
        assert not wrong, f"after {continuous.snapshots} snapshots: {wrong}\n{faultcheck.summary(snapshot)}"
        seen.append(snapshot)
    return seen


def _all_free(cluster: Cluster, namespace: str) -> bool:
    return not any(faultcheck.held(c) for c in faultcheck.take(cluster.kubectl, namespace).claims)


def test_a_torn_down_gang_keeps_its_devices_until_its_pods_have_stopped(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """Suspending a released gang's Job deletes its pods, which run out a 12 s grace period; the teardown that
    follows must leave their claims to them (the resourceclaim controller frees each once its pod is done)."""
    members = _start(cluster, namespace, gpu_gang("slow", 4, grace=12))
    cluster.kubectl("patch", "job", "slow", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    continuous = faultcheck.Continuous()
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "slow")) == "JobSuspended", "the group torn down (JobSuspended)", timeout=10)
    seen = _watch(cluster, namespace, 4, continuous)
    stopping = [len(_stopping(s.pods)) for s in seen]
    assert stopping and min(stopping) == len(members), f"every member kept running while torn down: {stopping} stopping"
    wait_for(lambda: not _running(_pods(cluster, namespace, "slow")), "the members stopped after their grace period", timeout=30)
    wait_for(lambda: _all_free(cluster, namespace), "every device free once its pod stopped", timeout=30)


def test_a_member_removed_after_it_succeeded_is_not_a_loss(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """disruptionMode all: one rank finishes and its pod object is removed (PodGC, a cleanup); the other three are
    a healthy gang still at work, and nothing is taken down."""
    members = _start(cluster, namespace, gpu_gang("done", 4, mode="all"))
    first = members[0]["metadata"]["name"]
    cluster.kubectl("annotate", "pod", first, "-n", namespace, "localcluster.phalanx.dev/exit=0")
    wait_for(
        lambda: any(p["metadata"]["name"] == first and p["status"].get("phase") == "Succeeded" for p in _pods(cluster, namespace, "done")),
        f"{first} Succeeded",
    )
    cluster.kubectl("delete", "pod", first, "-n", namespace, "--wait=false")
    wait_for(lambda: first not in {p["metadata"]["name"] for p in _pods(cluster, namespace, "done")}, f"{first} removed")
    time.sleep(3)  # the loop has seen the removal many times over (it runs on every change, and every 5 s)
    others = {p["metadata"]["uid"] for p in members[1:]}
    running = {p["metadata"]["uid"] for p in _running(_pods(cluster, namespace, "done")) if not p["metadata"].get("deletionTimestamp")}
    disrupted = next(
        (
            c
            for c in (_pod_group(cluster, namespace, "done").get("status") or {}).get("conditions") or []
            if c["type"] == keys.DISRUPTION_TARGET
        ),
        None,
    )
    assert others <= running, "the three ranks still at work were left alone"
    assert disrupted is None or disrupted["status"] != "True", disrupted


def _disruption_target(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == keys.DISRUPTION_TARGET), None)


def test_a_member_whose_eviction_is_refused_is_not_marked_and_the_teardown_finishes_later(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode all, one member lost, another protected by a PodDisruptionBudget: the protected member keeps
    running unmarked (a mark would make the Job ignore its real failures), the PodGroup says what it waits for, and
    the teardown finishes once the budget allows."""
    members = _start(cluster, namespace, gpu_gang("held", 4, mode="all"))
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in members}
    protected = by_index["3"]["metadata"]["name"]
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "rank-3"},
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/job-name": "held", "batch.kubernetes.io/job-completion-index": "3"}},
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(budget))
    wait_for(lambda: cluster.get("pdb", "rank-3", "-n", namespace).get("status", {}).get("currentHealthy") == 1, "the budget counts rank 3")
    cluster.kubectl("delete", "pod", by_index["0"]["metadata"]["name"], "-n", namespace, "--wait=false")
    waiting = wait_for(
        lambda: (
            "waiting for the eviction"
            in (c := _condition(_pod_group(cluster, namespace, "held"), keys.DISRUPTION_TARGET)).get("message", "")
            and c
        ),
        "the PodGroup says the teardown waits for the refused eviction",
        timeout=20,
    )
    assert protected in waiting["message"], waiting
    time.sleep(2)  # a few more teardown passes, each refused
    pod = cluster.get("pod", protected, "-n", namespace)
    assert not pod["metadata"].get("deletionTimestamp") and pod["status"]["phase"] == "Running", "the budget kept rank 3 running"
    assert _disruption_target(pod) is None, f"rank 3 runs on, marked for a teardown it was refused: {_disruption_target(pod)}"
    cluster.kubectl("delete", "pdb", "rank-3", "-n", namespace)
    wait_for(
        lambda: (p := cluster.get("pod", protected, "-n", namespace, "--ignore-not-found")) == {} or p["metadata"].get("deletionTimestamp"),
        "rank 3 evicted once the budget is gone",
        timeout=70,
    )
    marked = cluster.get("pod", protected, "-n", namespace, "--ignore-not-found")
    if marked:
        assert (_disruption_target(marked) or {}).get("reason") in ("GangDisrupted", "EvictionByEvictionAPI"), marked["status"]


def _condition(pod_group: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (pod_group.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


@pytest.mark.parametrize("code", [429, 503])
def test_a_transient_answer_to_a_gate_lift_is_sent_again_not_torn_down(
    cluster: Cluster, operator: Operator, namespace: str, code: int
) -> None:
    """Two of four gate lifts answered 429 (priority and fairness) or 503 (an etcd leader change), twice each: the
    gang is released whole, nothing is torn down, and the Job spends none of its back-off."""
    with flakyapi.flaky_lifts(cluster, namespace, flakyapi.FlakyLifts(code, times=2, indexes={"1", "2"})) as flaky:
        members = _start(cluster, namespace, gpu_gang("flaky", 4, mode="all"))
    assert sum(flaky.answered.values()) == 4, f"the transient answers were sent: {dict(flaky.answered)}"
    pod_group = _pod_group(cluster, namespace, "flaky")
    assert _reason(pod_group) == "Scheduled", pod_group["status"]
    torn = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown")["items"]
    assert not torn, [e["message"] for e in torn]
    job = cluster.get("job", "flaky", "-n", namespace)
    assert not (job.get("status") or {}).get("failed"), job["status"]
    assert len(members) == 4
