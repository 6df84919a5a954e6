"""Group-shared claims (KEP-5729): recorded on the Job, carried into the PodGroup in upstream's shape."""

from __future__ import annotations

import json

from phalanx.api import keys
from phalanx.jobs import objects

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
    assert objects.pod_group(source, "w-1").wire()["spec"]["resourceClaims"] == [FABRIC, SHARED]
    (template,) = objects.workload(source).wire()["spec"]["podGroupTemplates"]
    assert template["resourceClaims"] == [FABRIC, SHARED]


def test_a_job_without_group_claims_has_none_in_its_pod_group() -> None:
    source = objects.from_job(gang_job(None))
    assert source is not None
    assert "resourceClaims" not in objects.pod_group(source, "w-1").wire()["spec"]
