"""One ResourceClaim per PodGroup for each of its `resourceClaims` made from a template, as upstream makes it.

Upstream's resourceclaim controller (1.37, DRAWorkloadResourceClaims) does
this for an in-tree PodGroup; on a stock control plane nothing does it for
ours, so the loop does, idempotently, every cycle the group is looked at:
the claim is made from the template's spec, labels and annotations, with
upstream's `resource.kubernetes.io/pod-claim-name` annotation, controlled by
the PodGroup (the garbage collector deletes it with the group), named as
`naming.group_claim_name` says, and recorded in the PodGroup's
`status.resourceClaimStatuses`. Members find it by that name (the pod
webhook, `jobs.podclaims`), so their quorum waits for it like for any claim.
An entry naming an existing claim (`resourceClaimName`) needs nothing made.

`pending` is pure: which claims are still to make, and what stands in the way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys, naming, schema
from phalanx.kube.client import Conflict, Kube, claim_path

JSON = dict[str, Any]


@dataclass(frozen=True)
class ToMake:
    entry: str
    claim: str
    template: str


def pending(pod_group: Mapping[str, Any], claim: Callable[[str, str], Mapping[str, Any] | None]) -> tuple[list[ToMake], list[str]]:
    """Claims to make for the group, and problems no make can fix (a claim of that name that is not the group's)."""
    namespace, name, uid = pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], pod_group["metadata"]["uid"]
    todo: list[ToMake] = []
    problems: list[str] = []
    for entry in pod_group["spec"].get("resourceClaims") or []:
        template = entry.get("resourceClaimTemplateName")
        if template is None:
            continue
        wanted = naming.group_claim_name(name, entry["name"])
        found = claim(namespace, wanted)
        if found is None:
            todo.append(ToMake(entry["name"], wanted, template))
        elif not _controlled_by(found, uid):
            problems.append(f"ResourceClaim {wanted} exists but was not made for this PodGroup: delete it and Phalanx makes the group's")
    return todo, problems


def _controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def statuses(pod_group: Mapping[str, Any]) -> list[JSON]:
    """status.resourceClaimStatuses as upstream records them: each template entry and the claim made for it."""
    name = pod_group["metadata"]["name"]
    return [
        schema.PodGroupResourceClaimStatus(name=e["name"], resource_claim_name=naming.group_claim_name(name, e["name"])).wire()
        for e in pod_group["spec"].get("resourceClaims") or []
        if e.get("resourceClaimTemplateName")
    ]


def claim_from(pod_group: Mapping[str, Any], make: ToMake, template: Mapping[str, Any]) -> JSON:
    meta = pod_group["metadata"]
    body = (template.get("spec") or {}).get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": make.claim,
            "namespace": meta["namespace"],
            "labels": dict(body.get("labels") or {}),
            "annotations": {**(body.get("annotations") or {}), keys.POD_CLAIM_NAME: make.entry},
            "ownerReferences": [
                {"apiVersion": keys.API_VERSION, "kind": "PodGroup", "name": meta["name"], "uid": meta["uid"], "controller": True}
            ],
        },
        "spec": (template.get("spec") or {}).get("spec") or {},
    }


async def ensure(kube: Kube, pod_group: Mapping[str, Any], claim: Callable[[str, str], Mapping[str, Any] | None]) -> str | None:
    """Make what is missing; None once every group claim exists, else why the group still waits."""
    todo, problems = pending(pod_group, claim)
    namespace = pod_group["metadata"]["namespace"]
    for make in todo:
        template = await kube.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{make.template}")
        if template is None:
            problems.append(f"group claim {make.entry}: ResourceClaimTemplate {namespace}/{make.template} not found")
            continue
        # made meanwhile (by this loop before a restart): the watch shows it, and `pending` judges it next time
        with contextlib.suppress(Conflict):
            await kube.create(claim_path(namespace, "").rstrip("/"), claim_from(pod_group, make, template))
    recorded = (pod_group.get("status") or {}).get("resourceClaimStatuses") or []
    wanted = statuses(pod_group)
    if wanted and recorded != wanted:
        status = {"resourceClaimStatuses": wanted}
        await kube.apply_status("PodGroup", namespace, pod_group["metadata"]["name"], status, keys.GROUP_CLAIMS_MANAGER)
    if problems:
        return "; ".join(problems)
    if todo:
        return "waiting for the group's claims: " + ", ".join(m.claim for m in todo)
    return None
