"""Admission of pods labelled into a PodGroup (`podgroups.admission`), and what Job and JobSet admission refuse of
the label: each refusal names the field and the fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from phalanx.api import keys, naming
from phalanx.api.intent import GangSpecError
from phalanx.jobs import admission as job_admission
from phalanx.jobs import objects
from phalanx.jobsets import admission as jobset_admission
from phalanx.podgroups import admission

PATH = f"metadata.labels[{keys.POD_GROUP_LABEL}]"


def pod(label: str = "train", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "labels": {keys.POD_GROUP_LABEL: label}, **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def group(name: str = "train", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": "g"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "disruptionMode": {"all": {}}},
        "status": status,
    }


def refusal(pod_: dict[str, Any], pod_group: dict[str, Any] | None = None) -> str:
    with pytest.raises(GangSpecError) as caught:
        admission.mutate_pod(pod_, pod_group)
    return str(caught.value)


def test_a_labelled_pod_is_gated_and_keeps_its_own_gates() -> None:
    mutation = admission.mutate_pod(pod(), group())
    assert mutation.patch == {"spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}
    assert mutation.warnings == ()
    mine = pod()
    mine["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    gates = admission.mutate_pod(mine, group()).patch["spec"]["schedulingGates"]
    assert gates == [{"name": "example.com/other"}, {"name": keys.SCHEDULING_GATE}]


def test_a_label_naming_no_podgroup_is_refused_naming_the_group_and_the_fix() -> None:
    message = refusal(pod("trian"), None)
    assert message.startswith(f'{PATH}: Invalid value: "trian": no PodGroup trian in namespace ml'), message
    assert "create the PodGroup first" in message


def test_a_group_in_another_namespace_cannot_be_named() -> None:
    message = refusal(pod("other/train"), group())
    assert "a pod joins a PodGroup of its own namespace only" in message
    assert "create the PodGroup in namespace ml" in message


@pytest.mark.parametrize("value", ["Train", "-train", "train_1", ""])
def test_a_value_that_is_no_podgroup_name_is_refused(value: str) -> None:
    message = refusal(pod(value), group())
    assert "not a PodGroup name" in message and PATH in message, message


def test_a_pod_of_a_gang_owner_that_also_names_a_group_is_refused_as_two_groups() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "launcher", "uid": "j", "controller": True}
    gated = pod(ownerReferences=[ref])
    gated["spec"]["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    message = refusal(gated, group())
    assert "two gangs" in message and "its Job launcher" in message, message
    templated = pod()
    templated["metadata"]["labels"][keys.TEMPLATE_LABEL] = "launcher-pgt-0"
    assert "two gangs" in refusal(templated, group())
    plain = pod(ownerReferences=[ref])  # a Job that asks for no gang of its own: its pods join the group
    assert admission.mutate_pod(plain, group()).patch["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]


def test_a_group_made_for_a_job_or_being_deleted_takes_no_labelled_pod() -> None:
    jobs = group()
    jobs["metadata"]["labels"] = {keys.JOB_NAME_LABEL: "train"}
    assert "the one Phalanx made for train" in refusal(pod(), jobs)
    going = group()
    going["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert "being deleted" in refusal(pod(), going)


def test_a_pod_for_a_group_already_placed_is_admitted_as_a_late_member_and_told_so() -> None:
    placed = group(reservation={"state": "Released"})
    mutation = admission.mutate_pod(pod(), placed)
    assert mutation.patch["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    (warning,) = mutation.warnings
    assert "late member" in warning and "status.lateMembers" in warning


def gang_job_with_label() -> dict[str, Any]:
    return {
        "metadata": {"name": "launcher", "namespace": "ml", "uid": "j", "annotations": {keys.MIN_COUNT: "1"}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {"metadata": {"labels": {keys.POD_GROUP_LABEL: "mpi"}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }


def test_a_gang_job_whose_template_names_a_podgroup_is_refused_and_made_no_group() -> None:
    job = gang_job_with_label()
    with pytest.raises(GangSpecError) as caught:
        job_admission.mutate_job(copy.deepcopy(job), None, gang_default_mode="all", field_dropped=None)
    assert f"spec.template.metadata.labels[{keys.POD_GROUP_LABEL}]" in str(caught.value)
    assert "each pod would be in two groups" in str(caught.value)
    with pytest.raises(GangSpecError):
        job_admission.validate_job(job, None)
    with pytest.raises(GangSpecError):
        objects.from_job(job)  # admitted without the webhook: the controller makes no Workload or PodGroup
    del job["metadata"]["annotations"]
    job_admission.validate_job(job, None)  # the label alone: a member of PodGroup mpi, no gang of its own
    assert objects.from_job(job) is None


def test_a_gang_jobset_whose_replicated_job_names_a_podgroup_is_refused() -> None:
    template = {"metadata": {"labels": {keys.POD_GROUP_LABEL: "mpi"}}, "spec": {"containers": [{"name": "c"}]}}
    jobset = {
        "metadata": {"name": "js", "namespace": "ml", "annotations": {keys.POLICY: "gang"}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"parallelism": 2, "template": template}}}]},
    }
    with pytest.raises(GangSpecError) as caught:
        jobset_admission.validate_jobset(jobset, None)
    assert f"spec.replicatedJobs[0].template.spec.template.metadata.labels[{keys.POD_GROUP_LABEL}]" in str(caught.value)


def _sharing(pod_: dict[str, Any], entry: dict[str, str]) -> dict[str, Any]:
    pod_["spec"]["resourceClaims"] = [entry, {"name": "scratch", "resourceClaimTemplateName": "one-gpu"}]
    return pod_


def test_an_entry_of_a_group_claim_is_pointed_at_the_groups_claim_and_the_pods_own_stay() -> None:
    shared = group()
    shared["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimTemplateName": "one-channel"}]
    entries = admission.mutate_pod(_sharing(pod(), {"name": "fabric", "resourceClaimTemplateName": "one-channel"}), shared).patch["spec"][
        "resourceClaims"
    ]
    assert entries == [
        {"name": "fabric", "resourceClaimName": naming.group_claim_name("train", "fabric")},
        {"name": "scratch", "resourceClaimTemplateName": "one-gpu"},
    ]
    resolved = _sharing(pod(), entries[0])
    assert "resourceClaims" not in admission.mutate_pod(resolved, shared).patch["spec"], "an entry already pointed is left as it is"


def test_an_entry_named_as_a_group_claim_with_another_source_is_refused() -> None:
    shared = group()
    shared["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimTemplateName": "one-channel"}]
    message = refusal(_sharing(pod(), {"name": "fabric", "resourceClaimTemplateName": "two-channels"}), shared)
    assert message.startswith('spec.resourceClaims[0]: Invalid value: {"resourceClaimTemplateName": "two-channels"}'), message
    assert "PodGroup train shares the claim fabric" in message
    assert "write the entry as" in message and "or rename it" in message


def _annotated(**annotations: str) -> dict[str, Any]:
    annotated = group()
    annotated["metadata"]["annotations"] = {f"{keys.ANNOTATION_PREFIX}{k}": v for k, v in annotations.items()}
    return annotated


def group_refusal(new: dict[str, Any], old: dict[str, Any] | None = None) -> str:
    with pytest.raises(GangSpecError) as caught:
        admission.validate_group(new, old)
    return str(caught.value)


def test_a_podgroups_deadline_and_hold_are_read_and_a_typo_is_refused_naming_the_key_it_meant() -> None:
    admission.validate_group(_annotated(**{"ready-deadline": "5m", "hold-after": "0"}), None)
    message = group_refusal(_annotated(**{"ready-deadlin": "5m"}))
    assert message.startswith(f'metadata.annotations[{keys.ANNOTATION_PREFIX}ready-deadlin]: Invalid value: "5m": unknown key'), message
    assert f"did you mean {keys.READY_DEADLINE}?" in message


def test_a_podgroups_bad_duration_and_a_jobs_gang_annotation_are_refused_naming_the_fix() -> None:
    message = group_refusal(_annotated(**{"hold-after": "soon", "min-count": "4"}))
    assert f'metadata.annotations[{keys.MIN_COUNT}]: Invalid value: "4"' in message
    assert "set spec.schedulingPolicy.gang.minCount instead" in message
    assert f'metadata.annotations[{keys.HOLD_AFTER}]: Invalid value: "soon": must be a duration' in message


def test_a_podgroup_admitted_before_with_a_bad_annotation_can_still_be_updated() -> None:
    old = _annotated(**{"ready-deadlin": "5m"})
    admission.validate_group(_annotated(**{"ready-deadlin": "5m", "hold-after": "10m"}), old)
    assert "hold-after" in group_refusal(_annotated(**{"ready-deadlin": "5m", "hold-after": "10 minutes"}), old)
