"""A member's claim entry pointed at its group's claim, whichever kind made the pod (`jobs.podclaims` for a Job's
members, `podgroups.admission` for pods labelled into a user's PodGroup): why, in `jobs.podclaims`."""

from __future__ import annotations

from typing import Any

from phalanx.api import naming
from phalanx.api.intent import GroupClaim


def resolve(pod: dict[str, Any], claims: tuple[GroupClaim, ...], pod_group: str) -> list[dict[str, Any]] | None:
    """The pod's claim entries with each of the group's pointed at the group's claim; None when none changes."""
    entries = list(pod.get("spec", {}).get("resourceClaims") or [])
    resolved = [_resolved(e, claims, pod_group) for e in entries]
    return resolved if resolved != entries else None


def _resolved(entry: dict[str, Any], claims: tuple[GroupClaim, ...], pod_group: str) -> dict[str, Any]:
    for claim in claims:
        template = claim.resource_claim_template_name
        if template is not None and claim.name == entry.get("name") and entry.get("resourceClaimTemplateName") == template:
            return {"name": claim.name, "resourceClaimName": naming.group_claim_name(pod_group, claim.name)}
    return entry
