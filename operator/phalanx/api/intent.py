"""The gang intent a Job carries, in its two spellings, and the rules it must obey.

Portable spelling: annotations on the Job, which every API server keeps.
Upstream spelling: `spec.scheduling` (KEP-4671/KEP-5547), which an API server
without the WorkloadWithJob gate drops silently after mutating admission; the
webhook reads it there and records it as annotations, so from then on the
annotations are the single source of truth.

Every rule here reports the field, the bad value and the fix. The rules
follow upstream Job validation (minCount >= 1, minCount <= parallelism,
`all` not with basic, only minCount mutable).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from phalanx.api.keys import DISRUPTION_MODE, INTENT_ANNOTATIONS, MIN_COUNT, POLICY, TOPOLOGY_KEY

Policy = Literal["gang", "basic"]
Mode = Literal["single", "all"]
POLICIES: tuple[Policy, ...] = ("gang", "basic")
MODES: tuple[Mode, ...] = ("single", "all")
INT32_MAX = 2**31 - 1

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class FieldError:
    path: str
    value: Any
    detail: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: Invalid value: {json.dumps(self.value, sort_keys=True)}: {self.detail}; {self.fix}"


class GangSpecError(ValueError):
    """One or more field errors, reported together so the user fixes them in one round."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


@dataclass(frozen=True)
class GangIntent:
    """What the user asked for; `None` fields take their defaults (`with_default_mode`, `min_count_for`)."""

    policy: Policy
    min_count: int | None = None
    disruption_mode: Mode | None = None
    topology_key: str | None = None

    def to_annotations(self) -> dict[str, str]:
        out = {POLICY: self.policy}
        if self.min_count is not None:
            out[MIN_COUNT] = str(self.min_count)
        if self.disruption_mode is not None:
            out[DISRUPTION_MODE] = self.disruption_mode
        if self.topology_key is not None:
            out[TOPOLOGY_KEY] = self.topology_key
        return out

    def with_default_mode(self, gang_default: Mode) -> GangIntent:
        """Upstream defaults to `single`; for gangs the operator's default (normally `all`) applies."""
        if self.disruption_mode is not None:
            return self
        return replace(self, disruption_mode=gang_default if self.policy == "gang" else "single")

    def min_count_for(self, parallelism: int | None) -> int:
        """Unset minCount means every pod the Job runs at once, as upstream."""
        return self.min_count if self.min_count is not None else max(1, parallelism or 1)


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


def from_annotations(annotations: dict[str, str] | None) -> GangIntent | None:
    """Parse the portable spelling; `None` when the Job asks for nothing."""
    annotations = annotations or {}
    if not any(k in annotations for k in INTENT_ANNOTATIONS):
        return None
    errors: list[FieldError] = []
    policy = annotations.get(POLICY, "gang" if MIN_COUNT in annotations else None)
    if policy is None:
        errors.append(
            FieldError(annotation_path(POLICY), None, "required when other gang annotations are set", "set it to `gang` or `basic`")
        )
    elif policy not in POLICIES:
        errors.append(FieldError(annotation_path(POLICY), policy, "unknown policy", "use `gang` or `basic`"))
    min_count = None
    if MIN_COUNT in annotations:
        raw = annotations[MIN_COUNT]
        if not re.fullmatch(r"[0-9]+", raw.strip()) or int(raw) > INT32_MAX:
            errors.append(FieldError(annotation_path(MIN_COUNT), raw, "must be a whole number", 'write the gang size as digits, e.g. "4"'))
        else:
            min_count = int(raw)
    mode = annotations.get(DISRUPTION_MODE)
    if mode is not None and mode not in MODES:
        errors.append(FieldError(annotation_path(DISRUPTION_MODE), mode, "unknown disruption mode", "use `all` or `single`"))
    topology = annotations.get(TOPOLOGY_KEY)
    if errors:
        raise GangSpecError(errors)
    return GangIntent(policy=policy, min_count=min_count, disruption_mode=mode, topology_key=topology)  # type: ignore[arg-type]


def from_job_scheduling(scheduling: dict[str, Any]) -> GangIntent:
    """Parse upstream's `spec.scheduling` (batch/v1 JobSchedulingConfiguration)."""
    errors: list[FieldError] = []
    policy_spec = scheduling.get("schedulingPolicy") or {}
    members = [m for m in ("basic", "gang") if policy_spec.get(m) is not None]
    policy: Policy = "basic"
    min_count = None
    if len(members) > 1:
        errors.append(
            FieldError("spec.scheduling.schedulingPolicy", policy_spec, "must specify exactly one of: `basic`, `gang`", "keep one of them")
        )
    elif members == ["gang"]:
        policy = "gang"
        raw = (policy_spec["gang"] or {}).get("minCount")
        if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool) or raw > INT32_MAX):
            errors.append(
                FieldError(
                    "spec.scheduling.schedulingPolicy.gang.minCount", raw, "must be an integer", "write the gang size as a number, e.g. 4"
                )
            )
        else:
            min_count = raw
    mode_spec = scheduling.get("disruptionMode") or {}
    modes = [m for m in MODES if mode_spec.get(m) is not None]
    mode: Mode | None = None
    if len(modes) > 1:
        errors.append(
            FieldError("spec.scheduling.disruptionMode", mode_spec, "must specify exactly one of: `single`, `all`", "keep one of them")
        )
    elif modes:
        mode = modes[0]
    topology = (scheduling.get("schedulingConstraints") or {}).get("topology") or []
    if len(topology) > 1:
        errors.append(
            FieldError("spec.scheduling.schedulingConstraints.topology", topology, "must have at most 1 item", "keep a single topology key")
        )
    if errors:
        raise GangSpecError(errors)
    key = topology[0].get("key") if topology else None
    return GangIntent(policy=policy, min_count=min_count, disruption_mode=mode, topology_key=key)


SPEC_PATHS = {
    "policy": "spec.scheduling.schedulingPolicy",
    "min_count": "spec.scheduling.schedulingPolicy.gang.minCount",
    "disruption_mode": "spec.scheduling.disruptionMode",
    "topology_key": "spec.scheduling.schedulingConstraints.topology[0].key",
}
"""Where each field of the intent is written in upstream's spelling."""


def validate(intent: GangIntent, parallelism: int | None, *, spelled_in: GangIntent | None = None) -> None:
    """Rules for one Job on create (and for the new state on update).

    `spelled_in` is the intent as read from `spec.scheduling`: a value the user wrote there is reported at
    that path, not at the annotation Phalanx copies it to.
    """
    paths = {
        attr: SPEC_PATHS[attr] if spelled_in is not None and getattr(spelled_in, attr) is not None else annotation_path(key)
        for attr, key in (("min_count", MIN_COUNT), ("disruption_mode", DISRUPTION_MODE), ("topology_key", TOPOLOGY_KEY))
    }
    errors: list[FieldError] = []
    if intent.min_count is not None:
        if intent.policy == "basic":
            errors.append(
                FieldError(
                    paths["min_count"],
                    intent.min_count,
                    "minCount only applies to the gang policy",
                    "remove it or set the policy to `gang`",
                )
            )
        elif intent.min_count < 1:
            errors.append(
                FieldError(paths["min_count"], intent.min_count, "must be greater than or equal to 1", "a gang needs at least one pod")
            )
        elif intent.min_count > (parallelism if parallelism is not None else 1):
            p = parallelism if parallelism is not None else 1
            errors.append(
                FieldError(
                    paths["min_count"],
                    intent.min_count,
                    f"must not be greater than parallelism ({p})",
                    f"lower it to at most {p} or raise spec.parallelism",
                )
            )
    if intent.policy == "basic" and intent.disruption_mode == "all":
        errors.append(
            FieldError(
                paths["disruption_mode"],
                "all",
                "the disruptionMode `all` is not supported with the basic scheduling policy",
                "use the `gang` policy or the `single` mode",
            )
        )
    if intent.topology_key is not None and not _is_label_key(intent.topology_key):
        errors.append(
            FieldError(
                paths["topology_key"], intent.topology_key, "must be a node label key", "use a key such as topology.kubernetes.io/zone"
            )
        )
    if errors:
        raise GangSpecError(errors)


def validate_update(old: GangIntent | None, new: GangIntent | None) -> None:
    """Everything is immutable except minCount, as upstream."""
    if old == new:
        return
    if old is None or new is None:
        raise GangSpecError(
            [
                FieldError(
                    annotation_path(POLICY),
                    new.policy if new else None,
                    "gang scheduling cannot be added to or removed from an existing Job",
                    "delete and recreate the Job",
                )
            ]
        )
    errors = [
        FieldError(annotation_path(key), getattr(new, attr), "field is immutable", "delete and recreate the Job to change it")
        for key, attr in ((POLICY, "policy"), (DISRUPTION_MODE, "disruption_mode"), (TOPOLOGY_KEY, "topology_key"))
        if getattr(old, attr) != getattr(new, attr)
    ]
    if errors:
        raise GangSpecError(errors)


def contradictions(annotated: GangIntent, spec: GangIntent) -> list[FieldError]:
    """Both spellings given: each field set in both must agree."""
    errors = []
    for attr, key in (("policy", POLICY), ("min_count", MIN_COUNT), ("disruption_mode", DISRUPTION_MODE), ("topology_key", TOPOLOGY_KEY)):
        path = SPEC_PATHS[attr]
        a, s = getattr(annotated, attr), getattr(spec, attr)
        if a is not None and s is not None and a != s:
            errors.append(FieldError(annotation_path(key), a, f"contradicts {path} ({json.dumps(s)})", "set the value in one place only"))
    return errors


def _is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))
