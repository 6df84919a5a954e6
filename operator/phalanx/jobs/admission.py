"""Job admission, as pure functions: what to change on a Job and what to refuse.

The mutating webhook is the only place that ever sees `spec.scheduling` on an
API server without WorkloadWithJob, so it records the field as annotations
(and says so in a warning, since the server is about to drop it), and gates
the pod template so the Job controller creates pods Phalanx holds. The
validating webhook sees the result and enforces the rules, including
immutability on update.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import (
    GangIntent,
    GangSpecError,
    Mode,
    contradictions,
    from_annotations,
    from_job_scheduling,
    validate,
    validate_update,
)
from phalanx.api.naming import template_name


@dataclass(frozen=True)
class Mutation:
    """A merge patch for the Job and the warnings kubectl prints."""

    patch: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def mutate_job(job: dict[str, Any], old: dict[str, Any] | None, *, gang_default_mode: Mode, field_dropped: bool | None) -> Mutation:
    """Normalise the gang intent into annotations; on create, gate and label the pod template.

    `field_dropped` says whether this API server drops `spec.scheduling`
    (None: cannot tell), only to word the warning.
    """
    metadata = job.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    annotated = from_annotations(annotations)
    scheduling = (job.get("spec") or {}).get("scheduling")
    from_spec = from_job_scheduling(scheduling) if scheduling else None
    intent = _merge(annotated, from_spec, old is not None)
    if intent is None:
        return Mutation()
    if from_spec is not None:
        # The validating webhook only sees the annotations this copies the intent to: judged here, a bad value
        # is reported where the user wrote it.
        validate(intent, (job.get("spec") or {}).get("parallelism"), spelled_in=from_spec)
    if old is None:
        intent = intent.with_default_mode(gang_default_mode)
    else:
        previous = from_annotations((old.get("metadata") or {}).get("annotations"))
        if previous is not None and intent.disruption_mode is None:
            intent = replace(intent, disruption_mode=previous.disruption_mode)
    patch: dict[str, Any] = {}
    wanted = intent.to_annotations()
    if any(annotations.get(k) != v for k, v in wanted.items()):
        patch["metadata"] = {"annotations": wanted}
    warnings: list[str] = []
    if old is None:
        patch["spec"] = {"template": _gated_template(job, template_name(metadata.get("name", "")))}
        if from_spec is not None:
            warnings.append(_copied_warning(field_dropped))
    return Mutation(patch=patch, warnings=tuple(warnings))


def validate_job(job: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise `GangSpecError` when the Job's gang intent breaks a rule."""
    new_intent = from_annotations((job.get("metadata") or {}).get("annotations"))
    if old is not None:
        old_intent = from_annotations((old.get("metadata") or {}).get("annotations"))
        validate_update(old_intent, new_intent)
    if new_intent is not None:
        validate(new_intent, (job.get("spec") or {}).get("parallelism"))


def _merge(annotated: GangIntent | None, from_spec: GangIntent | None, updating: bool) -> GangIntent | None:
    if annotated is None or from_spec is None:
        return from_spec or annotated
    if updating:
        return from_spec
    errors = contradictions(annotated, from_spec)
    if errors:
        raise GangSpecError(errors)
    return GangIntent(
        policy=from_spec.policy,
        min_count=from_spec.min_count if from_spec.min_count is not None else annotated.min_count,
        disruption_mode=from_spec.disruption_mode or annotated.disruption_mode,
        topology_key=from_spec.topology_key or annotated.topology_key,
    )


def _gated_template(job: dict[str, Any], template: str) -> dict[str, Any]:
    pod_template = (job.get("spec") or {}).get("template") or {}
    gates = list((pod_template.get("spec") or {}).get("schedulingGates") or [])
    if not any(g.get("name") == keys.SCHEDULING_GATE for g in gates):
        gates.append({"name": keys.SCHEDULING_GATE})
    return {"metadata": {"labels": {keys.TEMPLATE_LABEL: template}}, "spec": {"schedulingGates": gates}}


def _copied_warning(field_dropped: bool | None) -> str:
    where = f"{keys.GROUP}/*"
    if field_dropped:
        return (
            "spec.scheduling is dropped silently by this API server (feature gate WorkloadWithJob is off); "
            f"Phalanx recorded it in the annotations {where} and will gang-schedule this Job"
        )
    return f"spec.scheduling was recorded by Phalanx in the annotations {where}; Phalanx gang-schedules this Job"
