"""A member's claim entry resolved to its group's claim, as the pod is created.

Upstream's resourceclaim controller (1.37, DRAWorkloadResourceClaims) leaves
the pod's `spec.resourceClaims` as written and, for an entry whose name and
source match one of the PodGroup's `resourceClaims`, records the group's claim
in `pod.status.resourceClaimStatuses` instead of making one for the pod. On a
stock API server that controller runs without the gate and would make every
pod a claim of its own from the template, and a pod's `spec.resourceClaims`
is immutable once created. So the pod webhook rewrites such an entry, at
creation, to `resourceClaimName: <the group's claim>`: the stock controller
then makes nothing, kube-scheduler and the kubelet see one claim shared by
every member, and the claim's name is known before it exists (`naming`).

Which entries are the group's is read from the pod's own annotation, copied
from the Job's by Job admission onto the pod template; the PodGroup's name from
the pod's controlling Job.
"""

from __future__ import annotations

import json
from typing import Any

from phalanx.api import keys, naming
from phalanx.api.intent import GangSpecError, group_claims
from phalanx.owners.admission import Mutation
from phalanx.owners.podclaims import resolve


def _job_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
            return ref
    return None


def pod_group_of(job_name: str, job_uid: str) -> str:
    return naming.pod_group_name(naming.workload_name(job_name, job_uid), naming.template_name(job_name))


def mutate_pod(pod: dict[str, Any]) -> Mutation:
    """Point each entry that matches a group claim (same name, same template) at the group's claim."""
    raw = (pod["metadata"].get("annotations") or {}).get(keys.RESOURCE_CLAIMS)
    owner = _job_owner(pod)
    if raw is None or owner is None:
        return Mutation()
    errors: list[Any] = []
    try:
        claims = group_claims(json.loads(raw), f"metadata.annotations[{keys.RESOURCE_CLAIMS}]", errors, strict=True)
    except ValueError:
        claims = None
    if claims is None:
        raise GangSpecError(errors) if errors else ValueError(f"annotation {keys.RESOURCE_CLAIMS} is not JSON")
    resolved = resolve(pod, claims, pod_group_of(owner["name"], owner["uid"]))
    return Mutation(patch={"spec": {"resourceClaims": resolved}}) if resolved is not None else Mutation()
