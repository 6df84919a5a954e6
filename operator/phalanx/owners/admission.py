"""What admission shares across kinds: the mutation it returns, the annotation keys it refuses, and the rule that
a pod is in one group only."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import (
    ANNOTATION_PATHS,
    FieldError,
    GangIntent,
    GangSpecError,
    hold_after,
    ready_deadline,
    unknown_keys,
    validate,
    validate_update,
)


@dataclass(frozen=True)
class Mutation:
    """What admission changes on an object of any kind (a merge patch) and the warnings kubectl prints."""

    patch: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def unknown_key_errors(
    owner: dict[str, Any], old: dict[str, Any] | None, known: tuple[str, ...] = keys.JOB_ANNOTATIONS
) -> list[FieldError]:
    """The owner's keys under our prefix Phalanx does not read (`known`: those it reads on this kind), and a ready
    deadline or hold-after it cannot read."""
    annotations = (owner.get("metadata") or {}).get("annotations")
    errors = unknown_keys(annotations, ((old or {}).get("metadata") or {}).get("annotations"), known)
    for duration in (ready_deadline, hold_after):
        try:
            duration(annotations)
        except GangSpecError as exc:
            errors += exc.errors
    return errors


def two_groups(owner: dict[str, Any], kind: str, template_path: str = "spec.template") -> FieldError | None:
    """A gang owner whose pod template also names a PodGroup by label would put each pod in two groups: its own
    and the labelled one. A template with the label alone is fine: the owner is then no gang of its own."""
    template = owner
    for part in template_path.split("."):
        template = (template.get(part) or {}) if isinstance(template, dict) else {}
    name = ((template.get("metadata") or {}).get("labels") or {}).get(keys.POD_GROUP_LABEL)
    if name is None:
        return None
    return FieldError(
        f"{template_path}.metadata.labels[{keys.POD_GROUP_LABEL}]",
        name,
        f"the {kind} asks for a gang of its own ({keys.ANNOTATION_PREFIX}* annotations) and its pods name PodGroup "
        f"{name} too: each pod would be in two groups",
        f"drop the {kind}'s gang annotations to gang its pods in PodGroup {name} (with other owners' pods), "
        f"or drop the label to gang the {kind} alone",
    )


def one_priority(names: set[str | None], path: str, what: str, fix: str) -> FieldError | None:
    """A gang has one priority: the pod templates of an owner of several (`path`) must name one class."""
    if len(names) <= 1:
        return None
    return FieldError(path, sorted(n or "" for n in names), f"the gang has one priority, but {what} name different priority classes", fix)


def sized_by_owner(intent: GangIntent, pods: int, counted: str, fix: str) -> list[FieldError]:
    """The rules of a gang an owner sizes (a JobSet's pods, a LeaderWorkerSet replica's): minCount at most `pods`
    (`counted` says what they are, `fix` how to have more), and every other rule a Job's."""
    errors = []
    if intent.min_count is not None and intent.policy == "gang" and intent.min_count > pods:
        errors.append(
            FieldError(
                ANNOTATION_PATHS["min_count"],
                intent.min_count,
                f"must not be greater than {counted}",
                f"lower it to at most {pods}, or {fix}",
            )
        )
    sized = intent.policy == "gang" and intent.min_count is not None and intent.min_count >= 1
    try:
        validate(replace(intent, min_count=None) if sized else intent, None)
    except GangSpecError as exc:
        errors += exc.errors
    return errors


def owner_errors(
    owner: dict[str, Any],
    old: dict[str, Any] | None,
    previous: GangIntent | None,
    intent: GangIntent | None,
    kind: str,
    known: tuple[str, ...] = keys.JOB_ANNOTATIONS,
) -> list[FieldError] | None:
    """What every kind sized by its owner refuses first: a change the update rules forbid (raised), keys it does not
    read, and group claims, which only a Job's gang has; None when it asks for no gang now (nothing more to check)."""
    if old is not None:
        validate_update(previous, intent)
    if intent is None:
        return None
    errors = unknown_key_errors(owner, old, known)
    if intent.resource_claims:
        errors.append(
            FieldError(
                ANNOTATION_PATHS["resource_claims"],
                [c.name for c in intent.resource_claims],
                f"claims shared by the group are not supported on a {kind} yet",
                "give each pod a claim of its own (a resourceClaimTemplateName in its template), or remove it",
            )
        )
    return errors
