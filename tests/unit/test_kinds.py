"""Several workload kinds behind one seam: each group gets the members its own owner has."""

from __future__ import annotations

import datetime

from phalanx.api import keys
from phalanx.jobs.owner import JOBS
from phalanx.jobsets.objects import JOBSET_UID_LABEL
from phalanx.kinds import KINDS
from phalanx.podgroups.owner import PODGROUPS
from phalanx.scheduling import accessors
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
    members = accessors.pods_by_group(groups, pods, KINDS)
    assert [p["metadata"]["name"] for p in members["g-js"]] == ["leader", "worker"]
    assert [p["metadata"]["name"] for p in members["g-solo"]] == ["solo"]
    assert [p["metadata"]["name"] for p in members["g-inner"]] == ["inner"], "a gang Job inside a JobSet that is no gang"


def test_a_copied_label_makes_no_member_of_another_namespace_or_without_a_job() -> None:
    stray = {"metadata": {"name": "stray", "namespace": "ml", "uid": "stray", "labels": {JOBSET_UID_LABEL: "js"}}}
    elsewhere = pod("elsewhere", "job-x", "js", namespace="other")
    members = accessors.pods_by_group([group("g-js", "JobSet", "js")], [stray, elsewhere], KINDS)
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


def user_group(name: str, namespace: str = "ml") -> dict:
    spec = {"schedulingPolicy": {"gang": {"minCount": 3}}, "disruptionMode": {"all": {}}}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": spec}


def labelled(p: dict, group_name: str) -> dict:
    p["metadata"]["labels"][keys.POD_GROUP_LABEL] = group_name
    return p


def test_a_user_podgroup_gangs_the_labelled_pods_of_any_owner_and_none_elsewhere() -> None:
    """A launcher Job's pod, a worker Job's pods and a bare pod in one PodGroup; the Jobs have no group of their own."""
    bare = {"metadata": {"name": "bare", "namespace": "ml", "uid": "bare", "labels": {keys.POD_GROUP_LABEL: "mpi"}}}
    pods = [
        labelled(pod("launcher-0", "job-l"), "mpi"),
        labelled(pod("worker-0", "job-w"), "mpi"),
        labelled(pod("worker-1", "job-w"), "mpi"),
        bare,
        labelled(pod("elsewhere", "job-x", namespace="other"), "mpi"),
        labelled(pod("another", "job-y"), "other-group"),
    ]
    mpi = user_group("mpi")
    members = accessors.pods_by_group([mpi], pods, KINDS)
    assert [p["metadata"]["name"] for p in members["uid-mpi"]] == ["launcher-0", "worker-0", "worker-1", "bare"]
    assert KINDS.of(mpi) is PODGROUPS and KINDS.name(mpi) == "mpi"
    assert KINDS.ref(mpi) == {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "mpi", "namespace": "ml", "uid": "uid-mpi"},
    }
    owner = {**mpi, "kind": "PodGroup"}
    assert KINDS.state(owner, "2026-12-01T00:00:00Z") is OwnerState.ACTIVE
    assert KINDS.min_count(owner) == 3
    assert KINDS.pods_owed(owner, mpi, 1, datetime.datetime.now(datetime.UTC)) is None


def test_a_group_phalanx_made_for_a_job_answers_to_the_job_not_to_labels() -> None:
    made = group("g-job", "Job", "job-s")
    made["metadata"]["labels"] = {keys.JOB_NAME_LABEL: "solo"}
    made["spec"] = user_group("x")["spec"]
    assert KINDS.of(made) is JOBS
    assert PODGROUPS.owner_uid(made) is None
    members = accessors.pods_by_group([made], [pod("solo", "job-s"), labelled(pod("copied", "job-c"), "g-job")], KINDS)
    assert [p["metadata"]["name"] for p in members["g-job"]] == ["solo"], "a label naming a Job's group makes no member"
