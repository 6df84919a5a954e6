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
import heldwrites
from jobs import gpu_gang, one_gpu_pod_spec, priority_classes
from phalanx.api import keys
from phalanx_dev.localcluster import demo


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


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """A PodGroup's or a pod's condition of that type; {} when it has none."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _reason(pod_group: dict[str, Any]) -> str | None:
    return _condition(pod_group, keys.INITIALLY_SCHEDULED).get("reason")


def _saying(cluster: Cluster, namespace: str, job: str, type_: str, text: str, what: str, timeout: float) -> dict[str, Any]:
    """The PodGroup's condition of that type once its message says `text`."""
    return wait_for(lambda: text in (c := _condition(_pod_group(cluster, namespace, job), type_)).get("message", "") and c, what, timeout)


def _budget(cluster: Cluster, namespace: str, name: str, min_available: int, labels: dict[str, str]) -> None:
    """A PodDisruptionBudget, once its controller has counted the healthy pods it selects."""
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(budget))
    wait_for(lambda: (cluster.get("pdb", name, "-n", namespace).get("status") or {}).get("observedGeneration"), f"budget {name} counted")


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


def test_a_gang_whose_finished_ranks_leave_one_to_replace_runs_it_and_is_scheduled(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode all, minCount 4: ranks 0-2 finish (exit 0), rank 3 is deleted. The loss takes the gang down;
    its Job creates rank 3 again alone, and the three finished ranks count toward minCount: rank 3 is placed and the
    group is Scheduled again, not left waiting for a quorum of 4 that can never exist."""
    members = _start(cluster, namespace, gpu_gang("fin", 4, mode="all"))
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in members}
    for index in "012":
        cluster.kubectl("annotate", "pod", by_index[index]["metadata"]["name"], "-n", namespace, "localcluster.phalanx.dev/exit=0")
    wait_for(lambda: sum(p["status"].get("phase") == "Succeeded" for p in _pods(cluster, namespace, "fin")) == 3, "ranks 0-2 Succeeded")
    old = by_index["3"]["metadata"]["uid"]
    cluster.kubectl("delete", "pod", by_index["3"]["metadata"]["name"], "-n", namespace, "--wait=false")

    def replaced() -> list[dict[str, Any]]:
        return [p for p in _running(_pods(cluster, namespace, "fin")) if p["metadata"]["uid"] != old]

    (again,) = wait_for(replaced, "rank 3 created again and running", timeout=60)
    assert again["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "3"
    scheduled = wait_for(
        lambda: (c := _condition(_pod_group(cluster, namespace, "fin"), keys.INITIALLY_SCHEDULED)).get("status") == "True" and c,
        "the group Scheduled again with its finished ranks counted",
    )
    assert "3 finished" in scheduled["message"], scheduled
    lost = (_pod_group(cluster, namespace, "fin").get("status") or {}).get("lost") or []
    assert [m["uid"] for m in lost] == [old], f"the loss of rank 3 was recorded (and took the gang down): {lost}"


def test_finished_ranks_removed_before_a_loss_still_count_once_the_teardown_ended_the_record(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode all, minCount 3: ranks 0-1 finish and their pods are removed (as PodGC removes a departed
    node's pods), then rank 2 is deleted. Only the record told that the removed ranks finished, and the teardown
    ends it; what it keeps in status.finished still counts, so the Job's lone replacement of rank 2 runs instead of
    waiting for a quorum of 3 that can never exist again (found by the room stream)."""
    members = _start(cluster, namespace, gpu_gang("gone", 3, mode="all"))
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in members}
    finished = {by_index[i]["metadata"]["uid"] for i in "01"}
    for index in "01":
        cluster.kubectl("annotate", "pod", by_index[index]["metadata"]["name"], "-n", namespace, "localcluster.phalanx.dev/exit=0")
    wait_for(lambda: sum(p["status"].get("phase") == "Succeeded" for p in _pods(cluster, namespace, "gone")) == 2, "ranks 0-1 Succeeded")
    for index in "01":
        cluster.kubectl("delete", "pod", by_index[index]["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_for(lambda: not finished & {p["metadata"]["uid"] for p in _pods(cluster, namespace, "gone")}, "ranks 0-1 removed")
    old = by_index["2"]["metadata"]["uid"]
    cluster.kubectl("delete", "pod", by_index["2"]["metadata"]["name"], "-n", namespace, "--wait=false")
    (again,) = wait_for(
        lambda: [p for p in _running(_pods(cluster, namespace, "gone")) if p["metadata"]["uid"] != old],
        "rank 2 created again and running with ranks 0-1 counted",
        timeout=60,
    )
    assert again["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    status = _pod_group(cluster, namespace, "gone").get("status") or {}
    assert [m["uid"] for m in status.get("lost") or []] == [old], f"the loss of rank 2 took the gang down: {status.get('lost')}"
    assert set(status.get("finished") or []) == finished, f"the teardown kept the removed ranks: {status.get('finished')}"
    scheduled = _condition(_pod_group(cluster, namespace, "gone"), keys.INITIALLY_SCHEDULED)
    assert scheduled.get("status") == "True" and "2 finished" in scheduled.get("message", ""), scheduled


def test_a_member_whose_eviction_is_refused_is_not_marked_and_the_teardown_finishes_later(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode all, one member lost, another protected by a PodDisruptionBudget: the protected member keeps
    running unmarked (a mark would make the Job ignore its real failures), the PodGroup says what it waits for, and
    the teardown finishes once the budget allows."""
    members = _start(cluster, namespace, gpu_gang("held", 4, mode="all"))
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in members}
    protected = by_index["3"]["metadata"]["name"]
    _budget(cluster, namespace, "rank-3", 1, {"batch.kubernetes.io/job-name": "held", "batch.kubernetes.io/job-completion-index": "3"})
    wait_for(lambda: cluster.get("pdb", "rank-3", "-n", namespace)["status"].get("currentHealthy") == 1, "the budget counts rank 3")
    cluster.kubectl("delete", "pod", by_index["0"]["metadata"]["name"], "-n", namespace, "--wait=false")
    waiting = _saying(
        cluster, namespace, "held", keys.DISRUPTION_TARGET, "waiting for the eviction", "the PodGroup says the teardown waits", 20
    )
    assert protected in waiting["message"], waiting
    time.sleep(2)  # a few more teardown passes, each refused
    pod = cluster.get("pod", protected, "-n", namespace)
    assert not pod["metadata"].get("deletionTimestamp") and pod["status"]["phase"] == "Running", "the budget kept rank 3 running"
    assert not _condition(pod, keys.DISRUPTION_TARGET), f"rank 3 runs on, marked for a teardown it was refused: {pod['status']}"
    wait_for(  # taken off before each eviction tried, put back once it is refused: however rank 3 ends, its Job counts it
        lambda: keys.JOB_TRACKING in (cluster.get("pod", protected, "-n", namespace)["metadata"].get("finalizers") or []),
        "rank 3 keeps the Job's tracking finalizer",
        timeout=5,
    )
    cluster.kubectl("delete", "pdb", "rank-3", "-n", namespace)

    def rank_3() -> dict:  # {} once gone (kubectl prints nothing for it): untracked, it goes as soon as it stops
        out = cluster.kubectl("get", "pod", protected, "-n", namespace, "--ignore-not-found", "-o", "json").stdout
        return json.loads(out) if out.strip() else {}

    wait_for(lambda: (p := rank_3()) == {} or p["metadata"].get("deletionTimestamp"), "rank 3 evicted once the budget is gone", timeout=70)
    marked = rank_3()
    if marked:
        assert _condition(marked, keys.DISRUPTION_TARGET).get("reason") in ("GangDisrupted", "EvictionByEvictionAPI"), marked["status"]


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


def _record(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    return (_pod_group(cluster, namespace, job).get("status") or {}).get("reservation") or {}


def test_a_replaced_member_leaves_the_record_so_it_stays_the_size_of_the_gang(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """disruptionMode single: a lost rank is replaced and its replacement joins the record; the lost one leaves it,
    or a long-running Job's PodGroup would grow with every replacement until its writes pass the object size limit."""
    members = _start(cluster, namespace, gpu_gang("long", 4, mode="single"))
    lost = members[0]
    cluster.kubectl("delete", "pod", lost["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_for(
        lambda: len({p["metadata"]["uid"] for p in _running(_pods(cluster, namespace, "long"))} - {lost["metadata"]["uid"]}) == 4,
        "the replacement released and running",
        timeout=60,
    )
    record = wait_for(lambda: (r := _record(cluster, namespace, "long")) and len(r["placements"]) <= 5 and r, "the record")
    placed = {p["uid"] for p in record["placements"]}
    assert lost["metadata"]["uid"] not in placed and len(placed) == 4, record["placements"]
    assert len(record["claims"]) == 4, [c["name"] for c in record["claims"]]


def test_members_a_raised_min_count_adds_are_released_together(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A running gang of 2 has its Job grown to 4 and its minCount raised to 4 (minCount is mutable, as upstream's):
    with room for one more rank, neither new rank is released (one alone would run below the new minCount); once
    there is room for both, both go together."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    blockers = [f"blocker-{i}" for i in range(3)]
    for name in blockers:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": one_gpu_pod_spec()}
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
    wait_for(lambda: all(cluster.get("pod", b, "-n", namespace)["spec"].get("nodeName") for b in blockers), "the blockers hold 3 GPUs")
    _start(cluster, namespace, gpu_gang("grow", 2))
    grow = {"metadata": {"annotations": {keys.MIN_COUNT: "4"}}, "spec": {"parallelism": 4, "completions": 4}}
    cluster.kubectl("patch", "job", "grow", "-n", namespace, "--type=merge", "-p", json.dumps(grow))
    wait_for(lambda: len(_pods(cluster, namespace, "grow")) == 4, "the Job created 2 more ranks")
    wait_for(
        lambda: _pod_group(cluster, namespace, "grow")["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4,
        "the PodGroup's minCount raised to 4",
    )
    time.sleep(4)  # many cycles: the one rank that fits would have gone by now
    pods = _pods(cluster, namespace, "grow")
    released = [p for p in pods if not faultcheck.gated(p)]
    assert len(released) == 2, f"no new rank released alone below minCount 4: {[p['metadata']['name'] for p in released]}"
    cluster.kubectl("delete", "pod", blockers[0], "-n", namespace, "--wait=false")
    wait_for(lambda: len(_running(_pods(cluster, namespace, "grow"))) == 4, "both new ranks released together once both fit")


def test_a_disruption_budget_is_summed_over_the_victims_and_never_broken(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """Four low-priority pods hold four GPUs under one budget that allows two disruptions; an urgent gang needs
    all six GPUs. Each victim alone is within the budget, the four together are not: nothing is evicted (the Eviction
    API would refuse the last two, and the preemption would hold the freed devices for nothing), and the status
    names the budget."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        for i in range(4):
            spec = {**one_gpu_pod_spec(), "priorityClassName": low}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"low-{i}", "labels": {"app": "low"}}, "spec": spec}
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
        _budget(cluster, namespace, "low", 2, {"app": "low"})
        wait_for(lambda: cluster.get("pdb", "low", "-n", namespace)["status"].get("disruptionsAllowed") == 2, "the budget allows 2")
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("urgent", 6, priority_class=urgent)))
        refused = _saying(
            cluster, namespace, "urgent", keys.INITIALLY_SCHEDULED, "PodDisruptionBudget", "the gang told which budget stops it", 30
        )
        assert f"{namespace}/low (allows 2)" in refused["message"], refused
        time.sleep(2)
        lows = cluster.get("pods", "-n", namespace, "-l", "app=low")["items"]
        assert len(_running(lows)) == 4 and not any(p["metadata"].get("deletionTimestamp") for p in lows), "no low pod evicted"
        pod_group = _pod_group(cluster, namespace, "urgent")
        assert not (pod_group.get("status") or {}).get("nomination"), pod_group["status"]["nomination"]


def _held_claim_pods(cluster: Cluster, namespace: str, *names: str) -> dict[str, dict[str, Any]]:
    """A claim of one GPU each and a pod that uses it, held by a gate of the test's own so kube-scheduler leaves the
    claims to the test; all created in one request (one creation second)."""
    items: list[dict[str, Any]] = []
    for name in names:
        spec = one_gpu_pod_spec()
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
        spec["schedulingGates"] = [{"name": "test.phalanx.dev/hold"}]
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
            }
        )
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{name}"}, "spec": spec})
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return {name: cluster.get("pod", f"pod-{name}", "-n", namespace) for name in names}


def _allocate(cluster: Cluster, namespace: str, claim: str, pod: dict[str, Any], device: tuple[str, str, str]) -> None:
    driver, pool, name = device
    status = {
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": driver, "pool": pool, "device": name}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}]},
            },
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
        }
    }
    cluster.kubectl("patch", "resourceclaim", claim, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def test_the_holder_that_allocated_first_keeps_a_device_held_twice_within_one_second(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """Two allocators write the same device into two claims in the same second (the race kubernetes#128980 leaves
    open). Timestamps tie at one-second resolution; the order of the writes does not: the claim allocated second
    yields, whatever the names and creation times say (here the first is named to sort last)."""
    device = ("gpu.example.com", "worker-1", "gpu-0")
    pods = _held_claim_pods(cluster, namespace, "z-first", "a-second")
    _allocate(cluster, namespace, "z-first", pods["z-first"], device)
    _allocate(cluster, namespace, "a-second", pods["a-second"], device)
    times = {
        c["metadata"]["name"]: (
            c["metadata"]["creationTimestamp"],
            [e["time"] for e in c["metadata"]["managedFields"] if e.get("subresource")],
        )
        for c in cluster.get("resourceclaims", "-n", namespace, "--show-managed-fields")["items"]
    }

    def taken_down() -> list[str]:
        pods = {p["metadata"]["name"]: p for p in cluster.get("pods", "-n", namespace)["items"]}
        return [
            n
            for n in ("pod-a-second", "pod-z-first")
            if n not in pods or pods[n]["metadata"].get("deletionTimestamp") or (pods[n].get("status") or {}).get("phase") == "Failed"
        ]

    wait_for(taken_down, "the later holder evicted", timeout=20)
    time.sleep(1)  # a second holder taken down too would show by now
    evicted = taken_down()
    assert evicted == ["pod-a-second"], f"the holder that allocated second yields: {evicted} (created, status written: {times})"
    kept = cluster.get("pod", "pod-z-first", "-n", namespace)
    assert not kept["metadata"].get("deletionTimestamp")


def test_a_release_waits_for_the_allocation_kube_scheduler_is_still_binding(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """kube-scheduler has reserved one of worker-1's two GPUs for a plain pod in memory, and its PreBind write is
    held up (a slow admission webhook on claims, `heldwrites`); the API shows the claim unallocated. A gang of two
    pinned to worker-1 then looks as if it fits. The release must wait for that write (the pod is nominated to
    worker-1: the evidence), find the device taken, and yield; had it gone on after a fixed settle, both would
    hold one device and the pod that allocated second (the plain one) would be evicted."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    on_worker_1 = {"kubernetes.io/hostname": "worker-1"}
    held = heldwrites.HeldWrites({"contender"})
    continuous = faultcheck.Continuous()
    with heldwrites.held_claim_writes(cluster, namespace, held):
        spec = {**one_gpu_pod_spec(grace=0), "nodeSelector": on_worker_1}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "contender"}, "spec": spec}
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
        assert held.arrived.wait(30), "kube-scheduler's write of the contender's claim reached the webhook"
        contender = cluster.get("pod", "contender", "-n", namespace)
        assert contender["status"].get("nominatedNodeName") == "worker-1" and not contender["spec"].get("nodeName"), contender["status"]
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["worker-1"]}]}
        ]}}}  # fmt: skip
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("pair", 2, affinity=affinity)))

        def reserved_during_the_hold() -> bool:
            snapshot = faultcheck.take(cluster.kubectl, namespace)
            assert not continuous.check(snapshot)
            claims = [c for c in snapshot.claims if c["metadata"]["name"].startswith("pair-")]
            return len(claims) == 2 and all(faultcheck.held(c) for c in claims)

        wait_for(reserved_during_the_hold, "the gang's claims written by Phalanx while the contender's write is held", timeout=60)
        ours = cluster.get("pod", "contender", "-n", namespace)
        mine = [c for c in cluster.get("resourceclaims", "-n", namespace)["items"] if c["metadata"]["name"].startswith("contender-")]
        assert not ours["spec"].get("nodeName") and not any(faultcheck.held(c) for c in mine), "the race happened: still in flight"
        time.sleep(3)  # a release that does not wait lifts the gates well within this
        held.let_go()
        _watch(cluster, namespace, 10, continuous)
    contender = cluster.get("pod", "contender", "-n", namespace)
    assert contender["spec"].get("nodeName") == "worker-1" and not contender["metadata"].get("deletionTimestamp"), (
        "the pod kube-scheduler was binding keeps its device"
    )
    pair = _pods(cluster, namespace, "pair")
    assert all(faultcheck.gated(p) for p in pair), "the gang was not released onto a device kube-scheduler had handed out"
    wrong = faultcheck.violations(faultcheck.take(cluster.kubectl, namespace))
    assert not [w for w in wrong if "wait while" not in w], wrong
    cluster.kubectl("delete", "pod", "contender", "-n", namespace, "--wait=false")
    wait_for(lambda: len(_running(_pods(cluster, namespace, "pair"))) == 2, "the gang runs once the device is free", timeout=60)
