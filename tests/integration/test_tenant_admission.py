"""What a tenant can do to Phalanx, through the real API server: every Job upstream accepts is admitted, only broken
gangs are refused (naming the field as written), the gate cannot be taken off a Job nor off a waiting gang's pods,
Phalanx's labels and annotations on those pods are its own, and markers anyone can write elsewhere (a pin
annotation, the controller-uid label) are not trusted.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import WORKLOADS, Cluster, Operator, _fresh_namespace, wait_for

from jobs import MIN4, as_json, gang_job, gpu_gang
from phalanx.api import keys, naming
from phalanx_dev.localcluster import demo

ANN = "metadata.annotations[scheduling.phalanx.dev/"
SIXTY_THREE = "train-" + "x" * 56 + "z"


def _denial(proc) -> str:
    return proc.stderr.strip().split("denied the request: ", 1)[-1]


def _pod_groups(cluster: Cluster, namespace: str) -> list[dict]:
    return cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _reason(pod_group: dict) -> str | None:
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED:
            return cond["reason"]
    return None


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def _events(cluster: Cluster, namespace: str, reason: str) -> list[dict]:
    return cluster.get("events", "-n", namespace, "--field-selector", f"reason={reason}")["items"]


def _with_completions(job: dict, completions: int) -> dict:
    job["spec"]["completions"] = completions
    return job


def _generated(job: dict) -> dict:
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "train-"
    return job


def _named(job: dict, name: str) -> dict:
    """NonIndexed: an Indexed Job's pod hostnames (`<name>-<index>`) limit its name to fewer characters, upstream."""
    job["metadata"]["name"] = name
    job["spec"]["completionMode"] = "NonIndexed"
    return job


ACCEPTED = [
    pytest.param(_generated(gang_job(annotations={keys.MIN_COUNT: "4"})), id="generateName"),
    pytest.param(_named(gang_job(annotations={keys.MIN_COUNT: "4"}), SIXTY_THREE), id="63-character-name"),
    pytest.param(_with_completions(gang_job(annotations={keys.MIN_COUNT: "2"}), 2), id="completions-equal-min-count"),
]


@pytest.mark.parametrize("job", ACCEPTED)
def test_jobs_upstream_accepts_are_admitted_as_gangs(cluster: Cluster, operator: Operator, namespace: str, job: dict) -> None:
    proc = cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", stdin=as_json(job), check=False)
    assert proc.returncode == 0, proc.stderr
    created = json.loads(proc.stdout)
    name = created["metadata"]["name"]
    template = created["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    labels = (template.get("metadata") or {}).get("labels") or {}
    if "generateName" in job["metadata"]:
        assert name.startswith("train-") and keys.TEMPLATE_LABEL not in labels, "the name was not known at admission"
    else:
        assert labels[keys.TEMPLATE_LABEL] == naming.template_name(name) and len(labels[keys.TEMPLATE_LABEL]) <= 63
    pod_group = wait_for(lambda: _pod_group(cluster, namespace, name), f"a PodGroup for {name}")
    assert pod_group["spec"]["workloadRef"]["templateName"] == naming.template_name(name)
    expected = int(job["metadata"]["annotations"][keys.MIN_COUNT])
    assert pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": expected}}


REFUSED = [
    pytest.param(
        _with_completions(gang_job(annotations={keys.MIN_COUNT: "4"}), 2),
        f"{ANN}min-count]: Invalid value: 4: must not be greater than completions (2); lower it to at most 2 or raise spec.completions",
        id="completions-below-min-count",
    ),
    pytest.param(
        gang_job(annotations={keys.MIN_COUNT: "9" * 5000}),
        f'{ANN}min-count]: Invalid value: "{"9" * 63}... (5002 characters): must be at most 2147483647; write the gang size, e.g. "4"',
        id="5000-digit-min-count",
    ),
    pytest.param(
        gang_job(scheduling={"schedulingPolicy": {"gang": {"minCount": 0}}}),
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than or equal to 1; a gang needs at least one pod",
        id="spec-min-count-0",
    ),
    pytest.param(
        _with_completions(gang_job(scheduling={"schedulingPolicy": {"gang": {"minCount": 3}}}), 2),
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 3: must not be greater than completions (2); "
        "lower it to at most 2 or raise spec.completions",
        id="spec-min-count-above-completions",
    ),
]


@pytest.mark.parametrize(("job", "message"), REFUSED)
def test_broken_gangs_are_refused_naming_the_field_as_written(
    cluster: Cluster, operator: Operator, module_namespace: str, job: dict, message: str
) -> None:
    proc = cluster.kubectl("create", "-n", module_namespace, "-f", "-", stdin=as_json(job), check=False)
    assert proc.returncode != 0, "the Job must not be created"
    assert "admission webhook" in proc.stderr and "Internal error" not in proc.stderr, proc.stderr
    assert _denial(proc) == message


def test_the_gate_cannot_be_removed_from_a_suspended_gang_job(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """Upstream lets a suspended Job's template gates change; a gang Job without Phalanx's gate would run pod by pod."""
    job = gang_job(annotations={keys.MIN_COUNT: "4"})
    job["spec"]["suspend"] = True
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=as_json(job))
    removal = json.dumps([{"op": "remove", "path": "/spec/template/spec/schedulingGates"}])
    proc = cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=json", "-p", removal, check=False)
    assert proc.returncode != 0, "the gate must stay"
    assert _denial(proc) == (
        "spec.template.spec.schedulingGates: Invalid value: []: the scheduling gate scheduling.phalanx.dev/gang must stay on a "
        "gang Job's pod template for the Job's whole life; keep it: Phalanx lifts it from each pod once the whole gang can be placed"
    )
    other = json.dumps({"spec": {"template": {"spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}, {"name": "example.com/x"}]}}}})
    cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", other)
    gates = cluster.get("job", "train", "-n", namespace)["spec"]["template"]["spec"]["schedulingGates"]
    assert {"name": keys.SCHEDULING_GATE} in gates, "changes that keep the gate are admitted"


TENANT = ("--as=tenant", "--as-group=system:authenticated")
GANG_PODS = "ValidatingAdmissionPolicy 'phalanx-gang-pods' with binding 'phalanx-gang-pods' denied request: "


def test_a_tenant_cannot_lift_the_gate_or_rewrite_phalanxs_keys_on_a_waiting_gang(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """A tenant allowed by RBAC to patch its pods (pods and pods/status: a status update may change labels too)
    cannot lift the gate on part of a waiting gang, nor add, change or remove a label or annotation under
    scheduling.phalanx.dev/ on one of its pods; any other change to them is theirs."""
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=as_json(gang_job(annotations=MIN4)))
    pods = wait_for(lambda: len(p := _pods(cluster, namespace, "train")) == 4 and p, "the gang's four pods")
    pod = pods[0]["metadata"]["name"]
    assert keys.TEMPLATE_LABEL in pods[0]["metadata"]["labels"]
    cluster.kubectl("create", "role", "tenant-pods", "-n", namespace, "--verb=get,patch,update", "--resource=pods,pods/status")
    cluster.kubectl("create", "rolebinding", "tenant-pods", "-n", namespace, "--role=tenant-pods", "--user=tenant")

    def tenant(*args: str):
        return cluster.kubectl(*TENANT, "-n", namespace, *args, check=False)

    gate = "the scheduling gate scheduling.phalanx.dev/gang is lifted only by Phalanx, once the whole gang is placed"
    labels = "the labels under scheduling.phalanx.dev/ of a pod held by the gate scheduling.phalanx.dev/gang are written only by Phalanx"
    annotations = (
        "the annotations under scheduling.phalanx.dev/ of a pod held by the gate scheduling.phalanx.dev/gang are written only by Phalanx"
    )
    refused = [
        (("patch", "pod", pod, "--type=json", "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]'), gate),
        (("patch", "pod", pod, "--type=merge", "-p", '{"spec": {"schedulingGates": []}}'), gate),
        (
            ("label", "pod", pod, f"{keys.TEMPLATE_LABEL}-"),
            f"{labels} (they tie the pod to its gang); refused: a change to {keys.TEMPLATE_LABEL}",
        ),
        (("label", "pod", pod, f"{keys.TEMPLATE_LABEL}=other", "--overwrite"), f"refused: a change to {keys.TEMPLATE_LABEL}"),
        (("label", "pod", pod, f"{keys.GROUP}/rank=0"), f"{labels} (they tie the pod to its gang); refused: a change to {keys.GROUP}/rank"),
        (
            ("annotate", "pod", pod, f"{keys.PINNED_NODE}=worker-1"),
            f"{annotations} (they say where it pins the pod); refused: a change to {keys.PINNED_NODE}",
        ),
        (
            (
                "patch",
                "pod",
                pod,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"metadata": {"labels": {keys.TEMPLATE_LABEL: None}}}),
            ),
            f"refused: a change to {keys.TEMPLATE_LABEL}",
        ),
    ]
    for args, message in refused:
        proc = tenant(*args)
        assert proc.returncode != 0, f"{args} must be refused"
        assert GANG_PODS in proc.stderr and message in proc.stderr.split(GANG_PODS, 1)[1], proc.stderr
    assert tenant("label", "pod", pod, "team=vision").returncode == 0, "a label of their own"
    assert tenant("annotate", "pod", pod, "example.com/note=waiting").returncode == 0, "an annotation of their own"
    after = cluster.get("pod", pod, "-n", namespace)
    assert after["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    assert after["metadata"]["labels"][keys.TEMPLATE_LABEL] == pods[0]["metadata"]["labels"][keys.TEMPLATE_LABEL]
    assert after["metadata"]["labels"]["team"] == "vision" and keys.PINNED_NODE not in after["metadata"].get("annotations", {})


@pytest.fixture
def other_namespace(cluster: Cluster) -> Iterator[str]:
    yield from _fresh_namespace(cluster)


def _unschedulable_pod(name: str, **extra: dict) -> dict:
    """A pod kube-scheduler never binds (more cpu than any node has), so only what Phalanx believes about it matters."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra.get("metadata", {})},
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "640"}}}],
            **extra.get("spec", {}),
        },
    }
    return pod


def test_a_forged_pin_annotation_takes_no_room(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A pending pod that claims `scheduling.phalanx.dev/node: worker-N` with more cpu than the node has would, if
    counted, leave no room on any node; the gang fits only because Phalanx ignores pins it did not record."""
    workers = sorted(n["metadata"]["name"] for n in cluster.get("nodes")["items"] if n["metadata"]["name"].startswith("worker"))
    for worker in workers:
        forged = _unschedulable_pod(f"forged-{worker}", metadata={"annotations": {keys.PINNED_NODE: worker}})
        cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(forged))
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("train", 2)))
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train")) == "Scheduled", "the gang Scheduled despite the forged pins")
    for worker in workers:
        pod = cluster.get("pod", f"forged-{worker}", "-n", namespace)
        assert not pod["spec"].get("nodeName"), "the forged pods really are pending: they hold nothing"


def test_a_foreign_pod_with_the_jobs_label_is_no_member(cluster: Cluster, operator: Operator, namespace: str, other_namespace: str) -> None:
    """Members are the pods the Job controls in its namespace: a gated pod in another namespace carrying the Job's
    controller-uid label (counted as a member before, it could not be released there: a rollback every cycle) is
    neither planned nor released. (In the Job's own namespace the Job controller adopts such a pod.)"""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    job = gpu_gang("train", 2)
    job["spec"]["suspend"] = True
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    uid = cluster.get("job", "train", "-n", namespace)["metadata"]["uid"]
    labels = {keys.JOB_UID_LABEL: uid, "batch.kubernetes.io/job-name": "train"}
    gate = {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}
    foreign = _unschedulable_pod("impostor", metadata={"labels": labels}, spec=gate)
    cluster.kubectl("create", "-n", other_namespace, "-f", "-", stdin=json.dumps(foreign))
    cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train")) == "Scheduled", "the gang Scheduled")
    # the counts on their own trail by up to status.COUNTS_EVERY: once they show both members bound, they were taken after both ran
    wait_for(lambda: _pod_group(cluster, namespace, "train")["status"].get("bound") == 2, "the counts show both members bound")
    pod_group = _pod_group(cluster, namespace, "train")
    assert pod_group["status"]["members"] == 2, "the impostors are not counted"
    placed = {p["name"] for p in pod_group["status"]["reservation"]["placements"]}
    assert placed == {p["metadata"]["name"] for p in _pods(cluster, namespace, "train")}
    impostor = cluster.get("pod", "impostor", "-n", other_namespace)
    assert impostor["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}] and not impostor["metadata"].get("annotations")
    assert not _events(cluster, namespace, "ReservationRolledBack"), "no rollback"


def test_a_resumed_gang_is_released_as_a_gang_again(cluster: Cluster, operator: Operator, namespace: str) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("train", 2, mode="single")))
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train")) == "Scheduled", "the gang Scheduled")
    first = {p["metadata"]["uid"] for p in _pods(cluster, namespace, "train")}
    cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train")) == "JobSuspended", "the group readmitted on suspension")
    cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train")) == "Scheduled", "the resumed gang Scheduled")
    pod_group = _pod_group(cluster, namespace, "train")
    placed = {p["uid"] for p in pod_group["status"]["reservation"]["placements"]}
    assert len(placed) == 2 and not placed & first, "the new incarnation's record holds the new pods only"
    released = [e for e in _events(cluster, namespace, "Released") if e["involvedObject"]["kind"] == "PodGroup"]
    assert len(released) == 2 and all("all 2 members placed on" in e["message"] for e in released), "both times as a whole gang"
