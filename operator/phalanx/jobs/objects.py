"""What Phalanx needs of a gang Job: its `GangSource` (the Workload and PodGroup are the framework's, `owners.source`)."""

from __future__ import annotations

from typing import Any

from phalanx.api import keys
from phalanx.api.intent import GangSpecError, from_annotations
from phalanx.owners import admission
from phalanx.owners.objects import GangSource


def from_job(job: dict[str, Any]) -> GangSource | None:
    """None for a Job that does not ask for gang scheduling. Raises GangSpecError on bad annotations."""
    meta = job["metadata"]
    intent = from_annotations(meta.get("annotations"))
    if intent is None:
        return None
    if (two := admission.two_groups(job, "Job")) is not None:
        raise GangSpecError([two])  # admitted without the webhook: told on the Job, and no Workload or PodGroup made
    spec = job.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    return GangSource(
        api_version="batch/v1",
        kind="Job",
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        intent=intent,
        parallelism=spec.get("parallelism"),
        completions=spec.get("completions"),
        priority_class_name=pod_spec.get("priorityClassName"),
        gated=any(g.get("name") == keys.SCHEDULING_GATE for g in pod_spec.get("schedulingGates") or []),
        ready_deadline=(meta.get("annotations") or {}).get(keys.READY_DEADLINE),
        hold_after=(meta.get("annotations") or {}).get(keys.HOLD_AFTER),
    )
