"""Group-shared claims (KEP-5729): recorded on the Job, carried into the PodGroup in upstream's shape."""

from __future__ import annotations

import json

import pytest

from phalanx.api import keys, naming
from phalanx.api.intent import GangSpecError
from phalanx.jobs import admission, objects, podclaims
from phalanx.owners import objects as made

FABRIC = {"name": "fabric", "resourceClaimTemplateName": "one-channel"}
SHARED = {"name": "dataset", "resourceClaimName": "imagenet"}


def gang_job(claims: list[dict] | None) -> dict:
    annotations = {keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}
    if claims is not None:
        annotations[keys.RESOURCE_CLAIMS] = json.dumps(claims)
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "annotations": annotations},
        "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {"resourceClaims": claims or []}}},
    }


def test_the_pod_group_and_the_workload_template_carry_the_group_claims_as_upstream() -> None:
    source = objects.from_job(gang_job([FABRIC, SHARED]))
    assert source is not None
    assert made.pod_group(source, "w-1").wire()["spec"]["resourceClaims"] == [FABRIC, SHARED]
    (template,) = made.workload(source).wire()["spec"]["podGroupTemplates"]
    assert template["resourceClaims"] == [FABRIC, SHARED]


def test_a_job_without_group_claims_has_none_in_its_pod_group() -> None:
    source = objects.from_job(gang_job(None))
    assert source is not None
    assert "resourceClaims" not in made.pod_group(source, "w-1").wire()["spec"]


def member(entries: list[dict], *, claims: list[dict] | None = None, owner: str | None = "Job") -> dict:
    annotations = {keys.RESOURCE_CLAIMS: json.dumps(claims if claims is not None else [FABRIC, SHARED])}
    refs = [{"apiVersion": "batch/v1", "kind": owner, "name": "train", "uid": "u-1", "controller": True}] if owner else []
    return {
        "metadata": {"name": "train-0", "namespace": "ml", "annotations": annotations, "ownerReferences": refs},
        "spec": {"resourceClaims": entries, "containers": [{"name": "rank"}]},
    }


def test_a_member_entry_from_the_group_template_is_pointed_at_the_group_claim() -> None:
    own = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    patch = podclaims.mutate_pod(member([FABRIC, SHARED, own])).patch
    group = naming.group_claim_name(podclaims.pod_group_of("train", "u-1"), "fabric")
    assert patch == {"spec": {"resourceClaims": [{"name": "fabric", "resourceClaimName": group}, SHARED, own]}}
    source = objects.from_job(gang_job([FABRIC]))
    assert source is not None and podclaims.pod_group_of("train", "u-1") == source.pod_group_name


def test_pods_that_are_not_a_gang_job_s_members_are_left_alone() -> None:
    assert podclaims.mutate_pod(member([FABRIC], owner=None)) == admission.Mutation()
    assert podclaims.mutate_pod(member([FABRIC], owner="ReplicaSet")) == admission.Mutation()
    other = {"name": "fabric", "resourceClaimTemplateName": "two-channels"}
    assert podclaims.mutate_pod(member([other])) == admission.Mutation(), "another source is the pod's own claim"


def test_a_forged_annotation_is_refused() -> None:
    with pytest.raises(GangSpecError, match="must have at most 4 items"):
        podclaims.mutate_pod(member([FABRIC], claims=[dict(FABRIC, name=f"c{i}") for i in range(5)]))
