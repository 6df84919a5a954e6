"""What Phalanx needs of a gang JobSet, as the `GangSource` a Job gives: the rest (Workload, PodGroup) is shared."""

from __future__ import annotations

from typing import Any

from phalanx.api import keys
from phalanx.api.intent import from_annotations
from phalanx.jobsets import admission
from phalanx.owners.objects import GangSource

JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
"""Set by JobSet's controller on every Job it makes and on their pods: the members of a JobSet's group."""


def from_jobset(jobset: dict[str, Any]) -> GangSource | None:
    """None for a JobSet that does not ask for gang scheduling. Raises GangSpecError on bad annotations."""
    meta = jobset["metadata"]
    intent = from_annotations(meta.get("annotations"))
    if intent is None:
        return None
    size = admission.size(jobset)
    return GangSource(
        api_version=admission.API_VERSION,
        kind=admission.KIND,
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        intent=intent,
        parallelism=size.parallelism,
        completions=size.completions,
        priority_class_name=admission.priority_class_name(jobset),
        gated=admission.gated(jobset),
        ready_deadline=(meta.get("annotations") or {}).get(keys.READY_DEADLINE),
        hold_after=(meta.get("annotations") or {}).get(keys.HOLD_AFTER),
        roles=admission.roles(jobset),
    )
