"""JobSets: JobSet's own controller beside the local control plane, and gangs of JobSets.

The controller is the release built from the Go module proxy; the first tests
prove that it is the real one (it makes the JobSet's Jobs and they run) and
that its webhooks see JobSets and JobSet pods only. Then a JobSet that asks
for a gang: one group over every pod of every Job it makes, placed whole or
not at all.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang, gpu_jobset
from phalanx.api import keys
from phalanx_dev.localcluster import demo, jobset

pytestmark = pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="JobSet's controller runs in the local cluster only")


def jobset_manifest(name: str, workers: int) -> str:
    def replicated(role: str, pods: int) -> str:
        return f"""
  - name: {role}
    replicas: 1
    template:
      spec:
        parallelism: {pods}
        completions: {pods}
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.36
              command: ["sleep", "3600"]"""

    return f"""apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}
spec:
  replicatedJobs:{replicated("leader", 1)}{replicated("workers", workers)}
"""


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[dict]:
    return cluster.get("-n", namespace, "pods", "-l", selector)["items"]


def test_the_controller_makes_a_jobsets_jobs_and_they_run(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("train", workers=2))
    label = f"{jobset.JOBSET_NAME_LABEL}=train"
    jobs = wait_for(lambda: len(items := cluster.get("-n", namespace, "jobs", "-l", label)["items"]) == 2 and items, "the two Jobs")
    assert sorted(j["metadata"]["name"] for j in jobs) == ["train-leader-0", "train-workers-0"]
    assert all(j["metadata"]["ownerReferences"][0]["kind"] == "JobSet" for j in jobs)
    running = wait_for(
        lambda: len(ps := [p for p in _pods(cluster, namespace, label) if p["status"].get("phase") == "Running"]) == 3 and ps,
        "3 JobSet pods Running",
    )
    assert all(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] in {"leader", "workers"} for p in running)


def test_its_webhooks_see_jobsets_and_their_pods_only(cluster: Cluster, namespace: str) -> None:
    """With the controller stopped, its webhooks fail closed: a JobSet is refused, but any other pod is still created."""
    local = cluster.local
    assert local is not None
    jobset.stop(local.kubeconfig)
    try:
        assert jobset.running(local.kubeconfig) == []
        refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("refused", workers=1), check=False)
        assert refused.returncode != 0
        assert "mjobset.kb.io" in refused.stderr, refused.stderr
        cluster.kubectl("-n", namespace, "run", "plain", "--image=busybox:1.36", "--restart=Never", "--", "sleep", "3600")
        assert cluster.get("-n", namespace, "pod", "plain")["metadata"]["name"] == "plain"
    finally:
        local.start_jobset()
    assert len(jobset.running(local.kubeconfig)) == 1
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("accepted", workers=1))


def _members(cluster: Cluster, namespace: str, name: str) -> list[dict]:
    return _pods(cluster, namespace, f"{jobset.JOBSET_NAME_LABEL}={name}")


def _pod_group(cluster: Cluster, namespace: str, name: str) -> dict | None:
    groups = cluster.get("-n", namespace, "podgroups", "-l", f"{keys.JOB_NAME_LABEL}={name}")["items"]
    return groups[0] if groups else None


def test_a_gang_jobset_is_placed_whole_only_when_all_of_it_fits(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """4 of the 6 GPUs go to a gang Job; a JobSet of 1 + 3 that needs 4 waits with no pod bound (one by one, two
    would have started), then runs whole once the Job is gone."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_gang("holder", 4)))
    wait_for(lambda: len([p for p in _pods(cluster, namespace, "app=holder") if p["spec"].get("nodeName")]) == 4, "the Job's 4 ranks bound")

    applied = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_jobset("train", 3, {keys.POLICY: "gang"})))
    assert "has no rule" not in applied.stderr, f"each replicated Job carries the README's rule: {applied.stderr}"
    group = wait_for(lambda: _pod_group(cluster, namespace, "train"), "the JobSet's PodGroup")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4, "every pod of both replicated Jobs"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    workload = cluster.get("-n", namespace, "workload", group["spec"]["workloadRef"]["workloadName"])
    assert workload["spec"]["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "train"}
    waiting = wait_for(lambda: len(m := _members(cluster, namespace, "train")) == 4 and m, "the JobSet's 4 pods, gated")
    assert all(keys.SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []] for p in waiting)
    wait_for(
        lambda: any(
            c["type"] == keys.INITIALLY_SCHEDULED and c["status"] == "False"
            for c in (_pod_group(cluster, namespace, "train") or {}).get("status", {}).get("conditions") or []
        ),
        "the group reported as waiting",
    )
    assert not any(p["spec"].get("nodeName") for p in _members(cluster, namespace, "train")), "no part of the gang was placed"

    cluster.kubectl("-n", namespace, "delete", "job", "holder", "--wait=false")
    bound = wait_for(
        lambda: len(b := [p for p in _members(cluster, namespace, "train") if p["spec"].get("nodeName")]) == 4 and b,
        "the whole JobSet bound",
        timeout=120,
    )
    roles = sorted(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] for p in bound)
    assert roles == ["leader", "workers", "workers", "workers"]
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in bound), "Phalanx placed each"
    explained = cluster.explain("train", namespace)
    assert explained.splitlines()[0].startswith(f"JobSet {namespace}/train  PodGroup "), explained
    assert "4 members, 4 bound" in explained, explained
    created = cluster.get("-n", namespace, "events", "--field-selector", "involvedObject.kind=JobSet,involvedObject.name=train")["items"]
    assert {"WorkloadCreated", "PodGroupCreated"} <= {e["reason"] for e in created}, "the JobSet is told what was made for it"


def test_a_gang_jobset_asking_more_than_it_runs_is_refused_naming_the_field(cluster: Cluster, operator: Operator, namespace: str) -> None:
    refused = cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_jobset("big", 3, {keys.MIN_COUNT: "9"})), check=False
    )
    assert refused.returncode != 0
    assert f"metadata.annotations[{keys.MIN_COUNT}]" in refused.stderr, refused.stderr
    assert "replicas x parallelism" in refused.stderr
    typo = cluster.kubectl(
        "-n",
        namespace,
        "apply",
        "-f",
        "-",
        stdin=json.dumps(gpu_jobset("typo", 3, {f"{keys.ANNOTATION_PREFIX}mincount": "4"})),
        check=False,
    )
    assert typo.returncode != 0, "a typo alone would run the JobSet pod by pod"
    assert f"did you mean {keys.MIN_COUNT}?" in typo.stderr, typo.stderr


def test_a_member_lost_takes_the_whole_jobset_gang_down_and_it_comes_back(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """disruptionMode all over a JobSet: one worker evicted, every member of both Jobs goes, and the Jobs make
    new pods that are placed whole again (the disruption rule keeps the Jobs from failing)."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_jobset("train", 2, {keys.POLICY: "gang", keys.DISRUPTION_MODE: "all"}))
    )
    first = wait_for(
        lambda: len(b := [p for p in _members(cluster, namespace, "train") if p["status"].get("phase") == "Running"]) == 3 and b,
        "the JobSet's 3 pods running",
    )
    victim = next(p for p in first if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim["metadata"]["name"], "namespace": namespace}}
    cluster.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{victim['metadata']['name']}/eviction",
        "-f",
        "-",
        stdin=json.dumps(eviction),
    )
    old = {p["metadata"]["uid"] for p in first}

    def back_whole() -> list[dict] | None:
        running = [
            p
            for p in _members(cluster, namespace, "train")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        return running if len(running) == 3 and not old & {p["metadata"]["uid"] for p in running} else None

    again = wait_for(back_whole, "every member replaced and the gang running again", timeout=180)
    assert len(again) == 3
    reasons = [e["reason"] for e in cluster.get("-n", namespace, "events", "--field-selector", "involvedObject.kind=PodGroup")["items"]]
    assert "GangDisrupted" in reasons or "GangTornDown" in reasons, reasons
    jobs = cluster.get("-n", namespace, "jobs", "-l", f"{jobset.JOBSET_NAME_LABEL}=train")["items"]
    assert not any(c["type"] == "Failed" and c["status"] == "True" for j in jobs for c in j["status"].get("conditions") or [])


def test_a_jobset_restarted_by_its_own_failure_policy_is_placed_whole_again(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A worker's container fails (not a disruption): its Job fails, JobSet's failurePolicy deletes every Job and
    makes them again, and the new pods, gated by their templates, are placed as one gang once more."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    body = gpu_jobset("train", 2, {keys.POLICY: "gang"})
    body["spec"]["failurePolicy"] = {"maxRestarts": 1}
    for rjob in body["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["backoffLimit"] = 0
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(body))
    first = wait_for(
        lambda: len(b := [p for p in _members(cluster, namespace, "train") if p["status"].get("phase") == "Running"]) == 3 and b,
        "the JobSet's 3 pods running",
    )
    worker = next(p for p in first if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers")
    cluster.kubectl("-n", namespace, "annotate", "pod", worker["metadata"]["name"], "localcluster.phalanx.dev/exit=1")
    old = {p["metadata"]["uid"] for p in first}

    def restarted() -> list[dict] | None:
        pods = [p for p in _members(cluster, namespace, "train") if p["metadata"]["uid"] not in old]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == 3 else None

    again = wait_for(restarted, "the restarted JobSet's 3 new pods running", timeout=180)
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in again} == {"1"}, "JobSet's own restart"
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in again), "placed by Phalanx"
    jobset_status = cluster.get("-n", namespace, "jobset", "train")["status"]
    assert jobset_status.get("restarts") == 1


def _composite(cluster: Cluster, namespace: str, name: str) -> dict | None:
    groups = cluster.get("-n", namespace, "compositepodgroups", "-l", f"{keys.JOB_NAME_LABEL}={name}")["items"]
    return groups[0] if groups else None


def _scheduled(group: dict | None) -> dict:
    return next((c for c in ((group or {}).get("status") or {}).get("conditions") or [] if c["type"] == keys.INITIALLY_SCHEDULED), {})


def test_a_jobset_of_roles_needs_each_replicated_jobs_minimum_together(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A leader and 4 workers, the workers' role at least 3 (`role-min-counts`): with 3 GPUs free the leader alone
    would fit, and so would the workers' minimum alone, but not both, so nothing goes; with 4 free the leader and 3
    workers go (fewer than all 5: the role's minimum, not the JobSet's size, is the gang); the last worker follows
    when its GPU frees."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    for holder, gpus in (("holder-a", 2), ("holder-b", 1)):
        cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_gang(holder, gpus)))
        wait_for(lambda h=holder, n=gpus: len([p for p in _pods(cluster, namespace, f"app={h}") if p["spec"].get("nodeName")]) == n, holder)

    roles = {keys.POLICY: "gang", keys.ROLE_MIN_COUNTS: json.dumps({"workers": 3})}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_jobset("train", 4, roles)))
    composite = wait_for(lambda: _composite(cluster, namespace, "train"), "the JobSet's CompositePodGroup")
    assert composite["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    assert composite["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    children = wait_for(
        lambda: len(c := cluster.get("-n", namespace, "podgroups", "-l", f"{keys.JOB_NAME_LABEL}=train")["items"]) == 2 and c,
        "a child PodGroup per replicated Job",
    )
    assert {(c["metadata"]["labels"][keys.ROLE_LABEL], json.dumps(c["spec"]["schedulingPolicy"])) for c in children} == {
        ("leader", json.dumps({"gang": {"minCount": 1}})),
        ("workers", json.dumps({"gang": {"minCount": 3}})),
    }
    assert {c["spec"]["parentCompositePodGroupName"] for c in children} == {composite["metadata"]["name"]}
    waiting = wait_for(lambda: len(m := _members(cluster, namespace, "train")) == 5 and m, "the JobSet's 5 pods, gated")
    assert {p["metadata"]["labels"][keys.ROLE_LABEL] for p in waiting} == {"leader", "workers"}
    short = wait_for(
        lambda: (c := _scheduled(_composite(cluster, namespace, "train"))).get("reason") == keys.UNSCHEDULABLE and c,
        "the composite Unschedulable",
    )
    assert "leader 1 of minCount 1" in short["message"] and "workers 2 of minCount 3" in short["message"], short
    assert not any(p["spec"].get("nodeName") for p in _members(cluster, namespace, "train")), "no role was placed alone"
    explained = cluster.explain("train", namespace)
    assert "leader" in explained and "workers" in explained and "Roles" in explained, explained

    cluster.kubectl("-n", namespace, "delete", "job", "holder-b", "--wait=false")
    bound = wait_for(
        lambda: len(b := [p for p in _members(cluster, namespace, "train") if p["spec"].get("nodeName")]) == 4 and b,
        "the leader and 3 workers bound",
        timeout=120,
    )
    assert sorted(p["metadata"]["labels"][keys.ROLE_LABEL] for p in bound) == ["leader", "workers", "workers", "workers"]
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in bound), "Phalanx placed each"
    wait_for(lambda: _scheduled(_composite(cluster, namespace, "train")).get("status") == "True", "the composite Scheduled")
    (late,) = [p for p in _members(cluster, namespace, "train") if not p["spec"].get("nodeName")]
    assert keys.SCHEDULING_GATE in [g["name"] for g in late["spec"].get("schedulingGates") or []], "the fifth waits behind the gate"

    cluster.kubectl("-n", namespace, "delete", "job", "holder-a", "--wait=false")
    wait_for(
        lambda: all(p["spec"].get("nodeName") for p in _members(cluster, namespace, "train")),
        "the fifth worker placed once a GPU frees",
        timeout=120,
    )
    made = cluster.get("-n", namespace, "events", "--field-selector", "involvedObject.kind=JobSet,involvedObject.name=train")["items"]
    assert any(e["reason"] == "PodGroupCreated" and "CompositePodGroup" in e["message"] for e in made), [e["message"] for e in made]


def test_a_jobset_of_roles_whose_leader_finished_is_placed_again_without_it(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """The leader exits 0, and its Job does not run it again; a worker is then evicted in mode all: the workers are
    taken down, made again by their Job, and placed whole without waiting for a leader that never comes (its role's
    minimum is met by the one that finished, as a count over all members counts those done)."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    roles = {keys.POLICY: "gang", keys.DISRUPTION_MODE: "all", keys.ROLE_MIN_COUNTS: json.dumps({"workers": 2})}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_jobset("train", 2, roles)))

    def of(role: str) -> list[dict]:
        return [p for p in _members(cluster, namespace, "train") if p["metadata"]["labels"].get(keys.ROLE_LABEL) == role]

    first = wait_for(lambda: len(r := [p for p in of("workers") if p["status"].get("phase") == "Running"]) == 2 and r, "2 workers running")
    (leader,) = wait_for(lambda: [p for p in of("leader") if p["status"].get("phase") == "Running"] or None, "the leader running")
    cluster.kubectl("-n", namespace, "annotate", "pod", leader["metadata"]["name"], "localcluster.phalanx.dev/exit=0")
    wait_for(lambda: [p["status"].get("phase") for p in of("leader")] == ["Succeeded"], "the leader Succeeded")

    victim = first[0]["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": namespace}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{victim}/eviction", "-f", "-", stdin=json.dumps(eviction))
    old = {p["metadata"]["uid"] for p in first}

    def again() -> list[dict] | None:
        running = [
            p
            for p in of("workers")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") and p["metadata"]["uid"] not in old
        ]
        return running if len(running) == 2 else None

    placed = wait_for(again, "both workers made again and placed whole, the leader's role met by the one done", timeout=180)
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in placed), "placed by Phalanx"
    assert [p["status"].get("phase") for p in of("leader")] == ["Succeeded"], "the leader was not run again"
