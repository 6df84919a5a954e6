"""disruptionMode on a running gang, on the local control plane: `all` takes the whole group down when one member
is lost (evicted, preempted by kube-scheduler, deleted, failed, its node gone); `single` touches nothing else and says so.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs); the node-loss case runs on a
cluster of its own with the fakegpu stand-in (a deleted node takes its driver's pool with it).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, demo, operatorproc

ROOT = Path(__file__).parents[2]


def _pods(kubectl: Callable[..., Any], namespace: str, job: str) -> list[dict]:
    out = kubectl("get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}", "-o", "json")
    return json.loads(out.stdout)["items"]


def _running(pods: list[dict]) -> list[dict]:
    return [
        p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]


def _pod_group(kubectl: Callable[..., Any], namespace: str, job: str) -> dict:
    out = kubectl("get", "podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}", "-o", "json")
    items = json.loads(out.stdout)["items"]
    return items[0] if items else {}


def _condition(pg: dict, type_: str) -> dict:
    return next((c for c in (pg.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _evict(kubectl: Callable[..., Any], namespace: str, pod: str) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-", stdin=json.dumps(body))


def _start(kubectl: Callable[..., Any], namespace: str, job: str, mode: str, **gang: Any) -> list[dict]:
    demo.apply(kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang(job, 4, mode=mode, **gang)))
    return wait_for(lambda: (r := _running(_pods(kubectl, namespace, job))) and len(r) == 4 and r, f"{job}: 4 members running")


def _all_gone_after_loss(kubectl: Callable[..., Any], namespace: str, job: str, first: list[dict], lose: Callable[[dict], None]) -> float:
    """Lose one member; return the seconds until every other member of that incarnation is gone or going."""
    victim, others = first[0], {p["metadata"]["uid"] for p in first[1:]}
    lost_at = time.monotonic()
    lose(victim)

    def others_down() -> bool:
        current = {p["metadata"]["uid"]: p for p in _pods(kubectl, namespace, job)}
        return all(
            uid not in current or current[uid]["metadata"].get("deletionTimestamp") or current[uid]["status"].get("phase") == "Failed"
            for uid in others
        )

    wait_for(others_down, f"{job}: the other members taken down", timeout=30)
    return time.monotonic() - lost_at


def _runs_again_whole(kubectl: Callable[..., Any], namespace: str, job: str, first: list[dict]) -> None:
    old = {p["metadata"]["uid"] for p in first}
    wait_for(
        lambda: (r := _running(_pods(kubectl, namespace, job))) and len(r) == 4 and not {p["metadata"]["uid"] for p in r} & old,
        f"{job}: the group admitted again whole, every member new",
        timeout=120,
    )


CAUSES: dict[str, Callable[[Callable[..., Any], str], Callable[[dict], None]]] = {
    "evicted": lambda kubectl, ns: lambda pod: _evict(kubectl, ns, pod["metadata"]["name"]),
    "deleted": lambda kubectl, ns: lambda pod: kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false"),
    "failed": lambda kubectl, ns: (
        lambda pod: kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "localcluster.phalanx.dev/exit=1")
    ),
}


SETTLED = "phalanx_settled_gangs_passed_total"
GRACE = 20
"""Seconds a member of the settled gang runs after its deletion: longer than the teardown of the others takes."""


def _settled(handle: operatorproc.OperatorProcess | None) -> None:
    """Until the loop has passed over a running gang at least twice without a visit (`_still_settled`): a loss from
    then on must get through that memo."""
    assert handle is not None, "reads the local operator's metrics"
    before = handle.metric(SETTLED)
    wait_for(lambda: handle.metric(SETTLED) >= before + 2, "the running gang passed over unvisited", timeout=30)


def test_a_running_gang_passed_over_unvisited_still_goes_down_whole_when_a_member_is_lost(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """The loop stops visiting a gang that runs with nothing to do; the scenario happens (the counter moves while
    it runs), then one member is deleted, and the whole gang goes down as with every visit. Each member runs out a
    GRACE s grace period, as on a kubelet: the loss is seen when the pod is marked deleted, while it still runs, not
    once it is gone (a memo that woke only then would leave the others on their devices for the grace period)."""
    first = _start(cluster.kubectl, namespace, "settled", "all", grace=GRACE)
    _settled(operator.handle)
    took = _all_gone_after_loss(cluster.kubectl, namespace, "settled", first, CAUSES["deleted"](cluster.kubectl, namespace))
    victim = next((p for p in _pods(cluster.kubectl, namespace, "settled") if p["metadata"]["uid"] == first[0]["metadata"]["uid"]), None)
    assert victim is not None and victim["metadata"].get("deletionTimestamp"), "the rest went down while the lost member ran out its grace"
    disrupted = wait_for(
        lambda: _condition(_pod_group(cluster.kubectl, namespace, "settled"), keys.DISRUPTION_TARGET) or None, "DisruptionTarget"
    )
    assert disrupted["reason"] == "GangDisrupted" and first[0]["metadata"]["name"] in disrupted["message"], disrupted
    print(f"a settled gang, member deleted: the rest gone in {took:.2f}s")


@pytest.mark.parametrize("how", sorted(CAUSES))
def test_all_mode_takes_the_whole_group_down_when_a_member_is_lost(cluster: Cluster, operator: Operator, namespace: str, how: str) -> None:
    job = f"all-{how}"
    first = _start(cluster.kubectl, namespace, job, "all")
    took = _all_gone_after_loss(cluster.kubectl, namespace, job, first, CAUSES[how](cluster.kubectl, namespace))
    disrupted = wait_for(
        lambda: _condition(_pod_group(cluster.kubectl, namespace, job), keys.DISRUPTION_TARGET) or None, "DisruptionTarget"
    )
    assert disrupted["reason"] == "GangDisrupted" and first[0]["metadata"]["name"] in disrupted["message"], disrupted
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangDisrupted")["items"]
    kinds = {e["involvedObject"]["kind"] for e in events}
    assert {"Pod", "PodGroup", "Job"} <= kinds, kinds
    print(f"disruptionMode all, member {how}: the rest gone in {took:.2f}s")
    if how == "evicted":  # the Job's back-off makes this slow; once is proof enough
        _runs_again_whole(cluster.kubectl, namespace, job, first)


def test_all_mode_follows_a_preemption_by_kube_scheduler(cluster: Cluster, operator: Operator, namespace: str) -> None:
    job = "all-preempted"
    first = _start(cluster.kubectl, namespace, job, "all")
    node = first[0]["spec"]["nodeName"]
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"urgent-{namespace}"},
        "value": 1000000,
    }
    hog = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog"},
        "spec": {
            "priorityClassName": f"urgent-{namespace}",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "hog", "image": "busybox:1.36", "resources": {"requests": {"cpu": "32"}}}],
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(priority))
    try:

        def lose(_: dict) -> None:
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(hog))

        on_node = [p for p in first if p["spec"]["nodeName"] == node]
        rest = [p for p in first if p["spec"]["nodeName"] != node]
        took = _all_gone_after_loss(cluster.kubectl, namespace, job, on_node + rest, lose)
        disrupted = wait_for(
            lambda: _condition(_pod_group(cluster.kubectl, namespace, job), keys.DISRUPTION_TARGET) or None, "DisruptionTarget"
        )
        assert "PreemptionByScheduler" in disrupted["message"], disrupted
        print(f"disruptionMode all, member preempted by kube-scheduler: the rest gone in {took:.2f}s")
    finally:
        cluster.kubectl("delete", "pod", "hog", "-n", namespace, "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "priorityclass", f"urgent-{namespace}", "--ignore-not-found")


def test_single_mode_touches_nothing_else_and_says_so(cluster: Cluster, operator: Operator, namespace: str) -> None:
    job = "single"
    first = _start(cluster.kubectl, namespace, job, "single")
    _evict(cluster.kubectl, namespace, first[0]["metadata"]["name"])
    below = wait_for(
        lambda: (c := _condition(_pod_group(cluster.kubectl, namespace, job), keys.DISRUPTION_TARGET)).get("status") == "True" and c,
        "the PodGroup says the group runs below minCount",
    )
    assert below["reason"] == "BelowMinCount" and "3 of minCount 4 members run" in below["message"], below
    survivors = {p["metadata"]["uid"] for p in first[1:]}
    running = {p["metadata"]["uid"] for p in _running(_pods(cluster.kubectl, namespace, job))}
    assert survivors <= running, "single mode left the other members alone"
    wait_for(
        lambda: _condition(_pod_group(cluster.kubectl, namespace, job), keys.DISRUPTION_TARGET).get("status") == "False",
        "the replacement released alone and the group back at minCount",
        timeout=90,
    )
    assert survivors <= {p["metadata"]["uid"] for p in _running(_pods(cluster.kubectl, namespace, job))}


def test_all_mode_follows_a_node_that_goes_away(cluster: Cluster) -> None:
    """A cluster of its own: the node is deleted for good."""
    if cluster.local is None:
        pytest.skip("deletes a node: needs a dedicated local control plane")
    local = LocalCluster(ClusterSpec(name=f"{cluster.local.spec.name}-node", driver="fakegpu"))
    local.up()
    try:
        handle = operatorproc.start(local, ROOT)
        try:
            local.kubectl("create", "namespace", "ml")
            first = _start(local.kubectl, "ml", "all-node", "all")
            _settled(handle)  # a node gone is no write to the gang or its pods: the nodes' version must wake it
            node = first[0]["spec"]["nodeName"]
            on_node = [p for p in first if p["spec"]["nodeName"] == node]
            rest = [p for p in first if p["spec"]["nodeName"] != node]
            took = _all_gone_after_loss(
                local.kubectl, "ml", "all-node", on_node + rest, lambda _: local.kubectl("delete", "node", node, "--wait=false")
            )
            disrupted = wait_for(
                lambda: _condition(_pod_group(local.kubectl, "ml", "all-node"), keys.DISRUPTION_TARGET) or None, "DisruptionTarget"
            )
            assert f"node {node} is gone" in disrupted["message"] or "deleted" in disrupted["message"], disrupted
            print(f"disruptionMode all, node {node} deleted: the rest gone in {took:.2f}s")
        finally:
            handle.stop()
    finally:
        local.down()


BACK_WITHIN = 15.0
"""Issue 22: a gang torn down by `all` runs again within this many seconds of its last member stopping."""


def _stopped(pod: dict | None) -> bool:
    return pod is None or pod["status"].get("phase") in ("Failed", "Succeeded")


def _back_after_last_stopped(kubectl: Callable[..., Any], namespace: str, job: str, first: list[dict]) -> float:
    """Seconds from the moment every member of `first` has stopped (gone, or ended) to 4 new members running."""
    old = {p["metadata"]["uid"] for p in first}
    stopped_at: float | None = None
    deadline = time.monotonic() + 180
    for turn in itertools.count():
        if time.monotonic() > deadline:
            break
        if turn % 5 == 0 and (failed := _failed_condition(_job_status(kubectl, namespace, job))):
            raise AssertionError(f"{job}: the Job failed: {failed}")
        pods = _pods(kubectl, namespace, job)
        now = time.monotonic()
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        if stopped_at is None and all(_stopped(by_uid.get(uid)) for uid in old):
            stopped_at = now
        new = [p for p in _running(pods) if p["metadata"]["uid"] not in old]
        if stopped_at is not None and len(new) == 4:
            return now - stopped_at
        time.sleep(0.2)
    raise TimeoutError(f"{job}: not back whole within 180s (last member stopped: {stopped_at is not None})")


def _job_status(kubectl: Callable[..., Any], namespace: str, job: str) -> dict:
    return json.loads(kubectl("get", "job", job, "-n", namespace, "-o", "json").stdout).get("status") or {}


def _failed_condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] in ("Failed", "FailureTarget") and c["status"] == "True"), None)


def test_a_gang_torn_down_by_all_runs_again_within_seconds_of_its_last_member_stopping(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """Without Phalanx taking its teardown out of the Job's count, the Job controller's back-off (10 s x 2^(n-1),
    every failed pod, podFailurePolicy-ignored ones included) kept a 4-rank gang down 80 s after one eviction."""
    job = "back"
    first = _start(cluster.kubectl, namespace, job, "all")
    _evict(cluster.kubectl, namespace, first[0]["metadata"]["name"])
    took = _back_after_last_stopped(cluster.kubectl, namespace, job, first)
    print(f"disruptionMode all, one member evicted: running again {took:.2f}s after its last member stopped")
    assert took <= BACK_WITHIN, f"back whole {took:.1f}s after the last member stopped"
    status = _job_status(cluster.kubectl, namespace, job)
    assert _failed_condition(status) is None, status
    assert status.get("failed", 0) == 0, f"the eviction is ignored by the Job's podFailurePolicy: {status}"


def test_a_member_failing_on_its_own_still_counts_and_the_rest_do_not(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """No podFailurePolicy, backoffLimit 2: the member that failed counts (failed 1), the three Phalanx took down
    with it do not, so the Job lives on; counting all four (4 > 2) failed it at the first teardown."""
    job = "counted"
    first = _start(cluster.kubectl, namespace, job, "all", backoff_limit=2, ignore_disruptions=False)
    cluster.kubectl("annotate", "pod", first[0]["metadata"]["name"], "-n", namespace, "localcluster.phalanx.dev/exit=1")
    took = _back_after_last_stopped(cluster.kubectl, namespace, job, first)
    print(f"disruptionMode all, one member failed: running again {took:.2f}s after its last member stopped")
    status = wait_for(lambda: (s := _job_status(cluster.kubectl, namespace, job)).get("failed") and s, "the failure counted")
    assert _failed_condition(status) is None, status
    assert status["failed"] == 1, f"exactly the member that failed counts: {status}"
