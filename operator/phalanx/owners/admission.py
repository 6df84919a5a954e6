"""What admission shares across kinds: the mutation it returns, the annotation keys it refuses, and the rule that
a pod is in one group only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import FieldError, GangSpecError, hold_after, ready_deadline, unknown_keys


@dataclass(frozen=True)
class Mutation:
    """What admission changes on an object of any kind (a merge patch) and the warnings kubectl prints."""

    patch: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def unknown_key_errors(owner: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """The owner's keys under our prefix Phalanx does not read, and a ready deadline or hold-after it cannot read."""
    annotations = (owner.get("metadata") or {}).get("annotations")
    errors = unknown_keys(annotations, ((old or {}).get("metadata") or {}).get("annotations"))
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
