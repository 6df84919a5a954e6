"""PodGroups of users' own on the local control plane: bare pods, and the pods of several Jobs, labelled
`scheduling.phalanx.dev/pod-group: <name>` into one group, placed whole or not at all (the README's "A gang of bare
pods, or across owners").

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs); each rank asks for one.
"""

from __future__ import annotations

import json
from typing import Any

from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang, one_gpu_pod_spec, priority_classes
from phalanx.api import keys, naming
from phalanx_dev.localcluster import demo


def pod_group(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "disruptionMode": {"all": {}}},
    }


def bare_pod(name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {keys.POD_GROUP_LABEL: group}},
        "spec": one_gpu_pod_spec(),
    }


def member_job(name: str, size: int, group: str) -> dict[str, Any]:
    """A Job that asks for no gang of its own: its pod template names the PodGroup."""
    job = gpu_gang(name, size)
    del job["metadata"]["annotations"]
    job["spec"]["template"]["metadata"]["labels"][keys.POD_GROUP_LABEL] = group
    return job


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _members(cluster: Cluster, namespace: str, group: str) -> list[dict]:
    return cluster.get("-n", namespace, "pods", "-l", f"{keys.POD_GROUP_LABEL}={group}")["items"]


def _live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") not in ("Succeeded", "Failed")]


def _running(cluster: Cluster, namespace: str, group: str, size: int) -> list[dict] | None:
    running = [p for p in _live(_members(cluster, namespace, group)) if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]
    return running if len(running) == size else None


def _condition(cluster: Cluster, namespace: str, group: str, type_: str) -> dict:
    status = cluster.get("-n", namespace, "podgroup", group).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _hold(cluster: Cluster, namespace: str, gpus: int) -> None:
    """A gang Job of its own that takes `gpus` of the 6 GPUs, running."""
    _apply(cluster, namespace, gpu_gang("holder", gpus))
    wait_for(lambda: _running_job(cluster, namespace, "holder", gpus), "the holder running")


def _waits_unplaced(cluster: Cluster, namespace: str, group: str, size: int) -> None:
    waiting = wait_for(lambda: len(m := _members(cluster, namespace, group)) == size and m, f"the {size} members of {group}")
    assert all(keys.SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []] for p in waiting), "gated at creation"
    unschedulable = wait_for(
        lambda: (c := _condition(cluster, namespace, group, keys.INITIALLY_SCHEDULED)).get("reason") == "Unschedulable" and c,
        f"{group} found Unschedulable",
    )
    assert unschedulable["status"] == "False"
    assert not any(p["spec"].get("nodeName") for p in _members(cluster, namespace, group)), "no part of the gang was placed"


def _placed_by_phalanx(pods: list[dict]) -> None:
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in pods), "Phalanx pinned each"


def _evict(cluster: Cluster, namespace: str, pod: str) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-", stdin=json.dumps(body))


def _others_down(cluster: Cluster, namespace: str, group: str, others: set[str]) -> bool:
    now = {p["metadata"]["uid"]: p for p in _members(cluster, namespace, group)}
    return all(
        uid not in now or now[uid]["metadata"].get("deletionTimestamp") or now[uid]["status"].get("phase") == "Failed" for uid in others
    )


def test_four_bare_pods_wait_whole_then_run_whole_and_go_down_together(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """Example 2 with bare pods: a PodGroup of minCount 4 and 4 labelled pods, one GPU each, wait with none bound
    while a gang Job holds 4 of the 6 GPUs (one by one, two would start), run whole once it goes, and in
    disruptionMode all one eviction takes the other three down (bare pods are not made again). A pod labelled after
    the release is admitted as a late member, told so, and counted in status.lateMembers."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _hold(cluster, namespace, 4)
    _apply(cluster, namespace, pod_group("train", 4), *(bare_pod(f"rank-{i}", "train") for i in range(4)))
    _waits_unplaced(cluster, namespace, "train", 4)
    explained = cluster.explain("train", namespace)
    assert explained.splitlines()[0].startswith(f"PodGroup {namespace}/train  PodGroup train"), explained

    cluster.kubectl("-n", namespace, "delete", "job", "holder", "--wait=false")
    running = wait_for(lambda: _running(cluster, namespace, "train", 4), "the 4 bare pods running", timeout=120)
    _placed_by_phalanx(running)
    assert "4 members, 4 bound" in cluster.explain("train", namespace)
    released = cluster.get("-n", namespace, "events", "--field-selector", "involvedObject.kind=PodGroup,involvedObject.name=train")["items"]
    assert [e["reason"] for e in released].count("Released") == 1, "the group is its own owner: one Event, not two"
    late = bare_pod("rank-late", "train")
    late["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"  # more than any node has: it stays behind the gate
    joined = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(late))
    assert "joins it as a late member" in joined.stderr, joined.stderr
    wait_for(lambda: (cluster.get("-n", namespace, "podgroup", "train").get("status") or {}).get("lateMembers") == 1, "lateMembers 1")
    cluster.kubectl("-n", namespace, "delete", "pod", "rank-late", "--wait=false")

    _evict(cluster, namespace, running[0]["metadata"]["name"])
    others = {p["metadata"]["uid"] for p in running[1:]}
    wait_for(lambda: _others_down(cluster, namespace, "train", others), "the other three taken down", timeout=60)
    disrupted = wait_for(
        lambda: (c := _condition(cluster, namespace, "train", keys.DISRUPTION_TARGET)).get("status") == "True" and c, "DisruptionTarget"
    )
    assert "disruptionMode all" in disrupted["message"], disrupted
    wait_for(lambda: not _live(_members(cluster, namespace, "train")), "every member gone: nobody makes bare pods again")


def test_bare_pods_share_their_groups_claim_one_device_for_all(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A PodGroup of your own with a group claim (`spec.resourceClaims`): each member's entry of that name and
    template is pointed at the group's one claim as it is created (no claim per pod), the claim is allocated once
    with every member in reservedFor, and the node-local GPU puts all 4 on its node. An entry of that name with
    another source is refused."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    shared = pod_group("share", 4)
    shared["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    _apply(cluster, namespace, shared, *(bare_pod(f"rank-{i}", "share") for i in range(4)))
    claim = naming.group_claim_name("share", "gpu")
    pods = wait_for(lambda: _running(cluster, namespace, "share", 4), "the 4 pods running on one shared claim", timeout=120)
    _placed_by_phalanx(pods)
    assert all(p["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": claim}] for p in pods), pods[0]["spec"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 1, "the shared node-local device puts every member on its node"
    claims = cluster.get("-n", namespace, "resourceclaims")["items"]
    assert [c["metadata"]["name"] for c in claims] == [claim], "one claim for the group, none per pod"
    made = claims[0]
    assert made["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    assert len(made["status"]["allocation"]["devices"]["results"]) == 1
    assert {r["name"] for r in made["status"]["reservedFor"]} == {p["metadata"]["name"] for p in pods}

    other = bare_pod("other", "share")
    other["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]
    refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(other), check=False)
    assert refused.returncode != 0 and "PodGroup share shares the claim gpu" in refused.stderr, refused.stderr
    assert "spec.resourceClaims[0]" in refused.stderr, refused.stderr


def test_a_label_naming_no_group_or_another_namespace_is_refused_and_unlabelled_pods_never_wait(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    missing = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(bare_pod("typo", "trian")), check=False)
    assert missing.returncode != 0
    assert (
        f"metadata.labels[{keys.POD_GROUP_LABEL}]" in missing.stderr and f"no PodGroup trian in namespace {namespace}" in missing.stderr
    ), missing.stderr
    elsewhere = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(bare_pod("far", "other/train")), check=False)
    assert elsewhere.returncode != 0
    assert "a pod joins a PodGroup of its own namespace only" in elsewhere.stderr, elsewhere.stderr
    basic = pod_group("basic", 1)
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    proc = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(basic), check=False)
    assert proc.returncode != 0 and "disruptionMode all needs schedulingPolicy gang" in proc.stderr, proc.stderr
    typo = pod_group("typo", 2)
    typo["metadata"]["annotations"] = {f"{keys.ANNOTATION_PREFIX}ready-deadlin": "5m"}
    proc = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(typo), check=False)
    assert proc.returncode != 0 and f"did you mean {keys.READY_DEADLINE}?" in proc.stderr, proc.stderr
    typo["metadata"]["annotations"] = {keys.READY_DEADLINE: "5m"}
    _apply(cluster, namespace, typo)
    proc = cluster.kubectl("-n", namespace, "annotate", "podgroup", "typo", f"{keys.MIN_COUNT}=2", check=False)
    assert proc.returncode != 0 and "set spec.schedulingPolicy.gang.minCount instead" in proc.stderr, proc.stderr
    _apply(cluster, namespace, pod_group("later", 2), bare_pod("member", "later"))
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    _apply(cluster, namespace, plain)
    assert not cluster.get("-n", namespace, "pod", "plain")["spec"].get("schedulingGates"), "a pod without the label is left alone"
    assert [g["name"] for g in cluster.get("-n", namespace, "pod", "member")["spec"]["schedulingGates"]] == [keys.SCHEDULING_GATE]


def test_a_launcher_job_and_a_worker_job_in_one_podgroup_run_whole_or_not_at_all(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """minCount 4 = launcher 1 + workers 3: with room for 3 (a gang Job holds 3 of the 6 GPUs) no pod of either Job is
    bound; with room all are; one worker evicted takes both Jobs' pods down, and the Jobs' new pods run whole again."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _hold(cluster, namespace, 3)
    _apply(cluster, namespace, pod_group("mpi", 4), member_job("launcher", 1, "mpi"), member_job("workers", 3, "mpi"))
    _waits_unplaced(cluster, namespace, "mpi", 4)
    assert not cluster.get("-n", namespace, "podgroups", "-l", f"{keys.JOB_NAME_LABEL} in (launcher,workers)")["items"], (
        "no group of their own"
    )

    cluster.kubectl("-n", namespace, "delete", "job", "holder", "--wait=false")
    first = wait_for(lambda: _running(cluster, namespace, "mpi", 4), "launcher and workers running", timeout=120)
    _placed_by_phalanx(first)
    assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-name"] for p in first) == ["launcher", "workers", "workers", "workers"]

    victim = next(p for p in first if p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "workers")
    _evict(cluster, namespace, victim["metadata"]["name"])
    old = {p["metadata"]["uid"] for p in first}
    wait_for(
        lambda: _others_down(cluster, namespace, "mpi", old - {victim["metadata"]["uid"]}), "the launcher and the other workers taken down"
    )

    def again() -> list[dict] | None:
        running = _running(cluster, namespace, "mpi", 4)
        return running if running and not old & {p["metadata"]["uid"] for p in running} else None

    second = wait_for(again, "both Jobs' new pods running whole", timeout=180)
    _placed_by_phalanx(second)
    jobs = cluster.get("-n", namespace, "jobs")["items"]
    assert not any(c["type"] == "Failed" and c["status"] == "True" for j in jobs for c in j["status"].get("conditions") or [])


def test_a_gang_job_whose_template_names_a_podgroup_is_refused(cluster: Cluster, operator: Operator, namespace: str) -> None:
    job = member_job("both", 2, "mpi")
    job["metadata"]["annotations"] = {keys.MIN_COUNT: "2"}
    refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(job), check=False)
    assert refused.returncode != 0
    assert f"spec.template.metadata.labels[{keys.POD_GROUP_LABEL}]" in refused.stderr and "two groups" in refused.stderr, refused.stderr


def test_an_urgent_podgroup_of_bare_pods_preempts_a_lower_priority_gang_job(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A gang Job of priority 100 holds 4 of the 6 GPUs; a PodGroup of 4 bare pods of priority 10000 takes its devices
    (the Job's pods evicted as a unit, told by whom), and runs whole."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        _apply(cluster, namespace, gpu_gang("holder", 4, mode="all", priority_class=low))
        wait_for(lambda: _running_job(cluster, namespace, "holder", 4), "the low-priority Job running")
        group = pod_group("urgent", 4)
        group["spec"]["priorityClassName"] = urgent
        pods = [bare_pod(f"rank-{i}", "urgent") for i in range(4)]
        for p in pods:
            p["spec"]["priorityClassName"] = urgent
        _apply(cluster, namespace, group, *pods)
        running = wait_for(lambda: _running(cluster, namespace, "urgent", 4), "the urgent PodGroup running", timeout=120)
        _placed_by_phalanx(running)
        events = cluster.get("events", "-n", namespace, "--field-selector", "reason=PreemptedByGang")["items"]
        assert len({e["involvedObject"]["name"] for e in events}) == 4, events
        assert all(f"{namespace}/urgent" in e["message"] for e in events), events[0]["message"]


def _running_job(cluster: Cluster, namespace: str, job: str, size: int) -> bool:
    pods = cluster.get("-n", namespace, "pods", "-l", f"batch.kubernetes.io/job-name={job}")["items"]
    return len([p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]) == size


def test_a_tenant_cannot_move_a_waiting_member_to_another_group_or_out(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """The label ties a pod to its gang: while Phalanx's gate holds the pod, a tenant (RBAC: patch pods) may neither
    change nor remove it, as with any key under scheduling.phalanx.dev/."""
    waiting = bare_pod("member", "big")
    waiting["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    _apply(cluster, namespace, pod_group("big", 2), pod_group("other", 1), waiting)
    cluster.kubectl("create", "role", "tenant-pods", "-n", namespace, "--verb=get,patch", "--resource=pods")
    cluster.kubectl("create", "rolebinding", "tenant-pods", "-n", namespace, "--role=tenant-pods", "--user=tenant")
    tenant = ("--as=tenant", "--as-group=system:authenticated", "-n", namespace)
    for change in (f"{keys.POD_GROUP_LABEL}=other", f"{keys.POD_GROUP_LABEL}-"):
        proc = cluster.kubectl(*tenant, "label", "pod", "member", change, "--overwrite", check=False)
        assert proc.returncode != 0 and f"refused: a change to {keys.POD_GROUP_LABEL}" in proc.stderr, proc.stderr
    assert cluster.get("-n", namespace, "pod", "member")["metadata"]["labels"][keys.POD_GROUP_LABEL] == "big"


def test_labelled_pods_the_webhook_never_sees_are_reported_as_running_alone(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """kube-system is left out of the webhooks (the cluster must stay repairable): a labelled pod there comes ungated,
    and its PodGroup gets a Warning naming it, instead of a silent one-by-one start."""
    name = f"loose-{namespace}"
    pod = bare_pod(name, name)
    pod["spec"] = {"containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "10m"}}}]}
    try:
        _apply(cluster, "kube-system", pod_group(name, 2), pod)
        assert not cluster.get("-n", "kube-system", "pod", name)["spec"].get("schedulingGates"), "no webhook there"
        selector = f"involvedObject.kind=PodGroup,involvedObject.name={name},reason=GangNotEnforced"
        told = wait_for(lambda: cluster.get("-n", "kube-system", "events", "--field-selector", selector)["items"], "the Warning")
        assert f"member(s) {name} came without the scheduling gate" in told[0]["message"], told[0]["message"]
        assert told[0]["type"] == "Warning"
    finally:
        cluster.kubectl("-n", "kube-system", "delete", "pod", name, "--grace-period=0", "--force", "--ignore-not-found", check=False)
        cluster.kubectl("-n", "kube-system", "delete", "podgroup", name, "--ignore-not-found", check=False)
