"""Several workload kinds behind one seam: each group gets the members its own owner has."""

from __future__ import annotations

from phalanx.jobs.owner import JOBS
from phalanx.jobsets.objects import JOBSET_UID_LABEL
from phalanx.kinds import KINDS
from phalanx.scheduling import inputs
from phalanx.scheduling.phase import OwnerState


def _ref(kind: str, uid: str) -> dict:
    return {"apiVersion": "x", "kind": kind, "name": uid, "uid": uid, "controller": True}


def pod(name: str, job_uid: str, jobset_uid: str | None = None, namespace: str = "ml") -> dict:
    labels = {JOBSET_UID_LABEL: jobset_uid} if jobset_uid else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": name, "labels": labels, "ownerReferences": [_ref("Job", job_uid)]}}


def group(uid: str, owner_kind: str, owner_uid: str, namespace: str = "ml") -> dict:
    return {"metadata": {"name": uid, "namespace": namespace, "uid": uid, "ownerReferences": [_ref(owner_kind, owner_uid)]}}


def test_a_jobsets_pods_are_its_groups_and_a_gang_jobs_are_its_own() -> None:
    pods = [pod("leader", "job-l", "js"), pod("worker", "job-w", "js"), pod("solo", "job-s"), pod("inner", "job-i", "plain-js")]
    groups = [group("g-js", "JobSet", "js"), group("g-solo", "Job", "job-s"), group("g-inner", "Job", "job-i")]
    members = inputs.pods_by_group(groups, pods, KINDS)
    assert [p["metadata"]["name"] for p in members["g-js"]] == ["leader", "worker"]
    assert [p["metadata"]["name"] for p in members["g-solo"]] == ["solo"]
    assert [p["metadata"]["name"] for p in members["g-inner"]] == ["inner"], "a gang Job inside a JobSet that is no gang"


def test_a_copied_label_makes_no_member_of_another_namespace_or_without_a_job() -> None:
    stray = {"metadata": {"name": "stray", "namespace": "ml", "uid": "stray", "labels": {JOBSET_UID_LABEL: "js"}}}
    elsewhere = pod("elsewhere", "job-x", "js", namespace="other")
    members = inputs.pods_by_group([group("g-js", "JobSet", "js")], [stray, elsewhere], KINDS)
    assert members["g-js"] == []


def test_each_group_answers_to_its_owners_kind() -> None:
    jobset_group, job_group = group("g-js", "JobSet", "js"), group("g-job", "Job", "j")
    jobset_group["metadata"]["labels"] = {"scheduling.phalanx.dev/job-name": "train"}
    assert KINDS.ref(jobset_group)["kind"] == "JobSet"
    assert KINDS.ref(jobset_group)["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert KINDS.of(job_group) is JOBS
    finished = {"kind": "JobSet", "metadata": {}, "spec": {}, "status": {"terminalState": "Completed"}}
    assert KINDS.state(finished, None) is OwnerState.FINISHED
    suspended = {"kind": "JobSet", "metadata": {}, "spec": {"suspend": True}}
    assert KINDS.state(suspended, None) is OwnerState.SUSPENDED
