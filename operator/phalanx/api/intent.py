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

import difflib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from phalanx.api.keys import (
    ANNOTATION_PREFIX,
    DISRUPTION_MODE,
    HOLD_AFTER,
    INTENT_ANNOTATIONS,
    JOB_ANNOTATIONS,
    MIN_COUNT,
    POLICY,
    READY_DEADLINE,
    RESOURCE_CLAIMS,
    TOPOLOGY_KEY,
)

Policy = Literal["gang", "basic"]
Mode = Literal["single", "all"]
POLICIES: tuple[Policy, ...] = ("gang", "basic")
MODES: tuple[Mode, ...] = ("single", "all")
INT32_MAX = 2**31 - 1
_SHOWN = 64
"""A value longer than this is cut in messages (a min-count of thousands of digits is echoed, not pasted back)."""

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_GROUP_CLAIMS = 4
"""Upstream's MaxPodGroupResourceClaims (scheduling/v1beta1), and the Job field's maxItems."""
MAX_RESERVED_FOR = 256
"""Upstream's limit on a claim's status.reservedFor: a group claim is reserved for every member, so no larger group may share one."""


@dataclass(frozen=True)
class FieldError:
    path: str
    value: Any
    detail: str
    fix: str
    out_of_range: bool = False
    """A number no Kubernetes integer can hold: a malformed request (400), not merely an invalid gang (422)."""

    def __str__(self) -> str:
        shown = json.dumps(self.value, sort_keys=True)
        if len(shown) > _SHOWN:
            shown = f"{shown[:_SHOWN]}... ({len(shown)} characters)"
        return f"{self.path}: Invalid value: {shown}: {self.detail}; {self.fix}"


class GangSpecError(ValueError):
    """One or more field errors, reported together so the user fixes them in one round."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        self.code = 400 if any(e.out_of_range for e in errors) else 422
        """The HTTP status admission answers with."""
        super().__init__("; ".join(str(e) for e in errors))


SPEC = "spec.scheduling"
SPEC_PATHS = {
    "policy": f"{SPEC}.schedulingPolicy",
    "min_count": f"{SPEC}.schedulingPolicy.gang.minCount",
    "disruption_mode": f"{SPEC}.disruptionMode",
    "topology_key": f"{SPEC}.schedulingConstraints.topology[0].key",
    "resource_claims": f"{SPEC}.resourceClaims",
}
"""Where each setting is when the user wrote upstream's spelling."""


@dataclass(frozen=True)
class GroupClaim:
    """One `resourceClaims` entry (upstream's PodGroupResourceClaim): a claim the whole group shares, by exactly one source."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None

    def wire(self) -> dict[str, str]:
        out = {"name": self.name}
        if self.resource_claim_name is not None:
            out["resourceClaimName"] = self.resource_claim_name
        if self.resource_claim_template_name is not None:
            out["resourceClaimTemplateName"] = self.resource_claim_template_name
        return out

    def source(self) -> dict[str, str]:
        """The entry without its name: what a pod's own entry of that name must say too."""
        return {k: v for k, v in self.wire().items() if k != "name"}


@dataclass(frozen=True)
class GangIntent:
    """What the user asked for; `None` fields take their defaults (`with_default_mode`, `min_count_for`)."""

    policy: Policy
    min_count: int | None = None
    disruption_mode: Mode | None = None
    topology_key: str | None = None
    resource_claims: tuple[GroupClaim, ...] | None = None

    def to_annotations(self) -> dict[str, str]:
        out = {POLICY: self.policy}
        if self.min_count is not None:
            out[MIN_COUNT] = str(self.min_count)
        if self.disruption_mode is not None:
            out[DISRUPTION_MODE] = self.disruption_mode
        if self.topology_key is not None:
            out[TOPOLOGY_KEY] = self.topology_key
        if self.resource_claims is not None:
            out[RESOURCE_CLAIMS] = json.dumps([c.wire() for c in self.resource_claims], separators=(",", ":"))
        return out

    def with_default_mode(self, gang_default: Mode) -> GangIntent:
        """Upstream defaults to `single`; for gangs the operator's default (normally `all`) applies."""
        if self.disruption_mode is not None:
            return self
        return replace(self, disruption_mode=gang_default if self.policy == "gang" else "single")

    def min_count_for(self, parallelism: int | None, completions: int | None = None) -> int:
        """Unset minCount means every pod the Job runs at once: upstream's parallelism, but never more than the completions."""
        if self.min_count is not None:
            return self.min_count
        return max(1, capacity(parallelism, completions)[0])


def capacity(parallelism: int | None, completions: int | None) -> tuple[int, str]:
    """How many pods the Job can ever run at once, and the field that sets the limit."""
    p = 1 if parallelism is None else parallelism
    if completions is not None and completions < p:
        return completions, "completions"
    return p, "parallelism"


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


ANNOTATION_PATHS = {
    "policy": annotation_path(POLICY),
    "min_count": annotation_path(MIN_COUNT),
    "disruption_mode": annotation_path(DISRUPTION_MODE),
    "topology_key": annotation_path(TOPOLOGY_KEY),
    "resource_claims": annotation_path(RESOURCE_CLAIMS),
}
"""Where each setting is in the portable spelling."""


def unknown_keys(
    annotations: dict[str, str] | None, previous: dict[str, str] | None = None, known: tuple[str, ...] = JOB_ANNOTATIONS
) -> list[FieldError]:
    """Keys under our prefix that Phalanx does not read (`known`: those it reads on this kind): a typo (`mincount`)
    would admit the object with no word, and the setting it meant would never apply.

    Only keys the request adds count (`previous`: the annotations before an
    update), so an object an older Phalanx admitted with one can still be
    updated and the key removed.
    """
    return [
        FieldError(
            annotation_path(key), value, f"unknown key under {ANNOTATION_PREFIX}, which Phalanx would ignore", _nearest_key(key, known)
        )
        for key, value in sorted((annotations or {}).items())
        if key.startswith(ANNOTATION_PREFIX) and key not in known and key not in (previous or {})
    ]


_DURATION = re.compile(r"^([0-9]{1,9})(s|m|h)?$")
_UNIT = {None: 1, "s": 1, "m": 60, "h": 3600}


def ready_deadline(annotations: dict[str, str] | None) -> float | None:
    """The Job's ready deadline in seconds (0: none), None when it sets none. Raises GangSpecError on a bad value."""
    return _duration(annotations, READY_DEADLINE, "turns the deadline off")


def hold_after(annotations: dict[str, str] | None) -> float | None:
    """How long the gang waits at the head of the line before devices are held for it (0: never), None when unset."""
    return _duration(annotations, HOLD_AFTER, "never holds devices for it")


def _duration(annotations: dict[str, str] | None, key: str, zero: str) -> float | None:
    raw = (annotations or {}).get(key)
    if raw is None:
        return None
    found = _DURATION.fullmatch(raw.strip())
    if found is None:
        fix = f'write seconds, or a number with s, m or h, e.g. "300" or "5m" ("0" {zero})'
        raise GangSpecError([FieldError(annotation_path(key), raw, "must be a duration", fix)])
    return float(int(found.group(1)) * _UNIT[found.group(2)])


def _nearest_key(key: str, known: tuple[str, ...]) -> str:
    """Matched on the part after the prefix, which every key shares and would make any two look alike."""
    names = {k.removeprefix(ANNOTATION_PREFIX): k for k in known}
    close = difflib.get_close_matches(key.removeprefix(ANNOTATION_PREFIX).lower(), names, n=1)
    if close:
        return f"did you mean {names[close[0]]}?"
    return f"use one of {', '.join(known)}, or remove it"


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
        digits = raw.strip()
        if not re.fullmatch(r"[0-9]+", digits):
            errors.append(FieldError(annotation_path(MIN_COUNT), raw, "must be a whole number", 'write the gang size as digits, e.g. "4"'))
        elif len(digits.lstrip("0")) > len(str(INT32_MAX)) or int(digits) > INT32_MAX:
            errors.append(
                FieldError(annotation_path(MIN_COUNT), raw, f"must be at most {INT32_MAX}", 'write the gang size, e.g. "4"', True)
            )
        else:
            min_count = int(digits)
    mode = annotations.get(DISRUPTION_MODE)
    if mode is not None and mode not in MODES:
        errors.append(FieldError(annotation_path(DISRUPTION_MODE), mode, "unknown disruption mode", "use `all` or `single`"))
    topology = annotations.get(TOPOLOGY_KEY)
    claims = None
    if RESOURCE_CLAIMS in annotations:
        claims = _claims_annotation(annotations[RESOURCE_CLAIMS], errors) or None
    if errors:
        raise GangSpecError(errors)
    return GangIntent(policy=policy, min_count=min_count, disruption_mode=mode, topology_key=topology, resource_claims=claims)  # type: ignore[arg-type]


def _claims_annotation(raw: str, errors: list[FieldError]) -> tuple[GroupClaim, ...] | None:
    path = annotation_path(RESOURCE_CLAIMS)
    try:
        value = json.loads(raw)
    except ValueError:
        errors.append(
            FieldError(
                path,
                raw,
                "must be a JSON list",
                'write it as upstream\'s field, e.g. [{"name": "fabric", "resourceClaimTemplateName": "one-channel"}]',
            )
        )
        return None
    return group_claims(value, path, errors, strict=True)


def group_claims(value: Any, path: str, errors: list[FieldError], *, strict: bool = False) -> tuple[GroupClaim, ...] | None:
    """Upstream's rules for `resourceClaims`: a list of at most 4, names unique DNS labels, exactly one source, a DNS subdomain.

    `strict` refuses keys upstream's type does not have (the annotation is
    free text; `spec.scheduling` was already decoded by the API server).
    """
    if not isinstance(value, list):
        errors.append(
            FieldError(path, value, "must be a list", 'write it as [{"name": "fabric", "resourceClaimTemplateName": "one-channel"}]')
        )
        return None
    if len(value) > MAX_GROUP_CLAIMS:
        errors.append(
            FieldError(
                path,
                [e.get("name") if isinstance(e, dict) else e for e in value],
                f"must have at most {MAX_GROUP_CLAIMS} items",
                f"share at most {MAX_GROUP_CLAIMS} claims per group (upstream's limit); put several requests in one claim's template",
            )
        )
        return None
    before = len(errors)
    claims: list[GroupClaim] = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        at = f"{path}[{i}]"
        if not isinstance(entry, dict):
            errors.append(FieldError(at, entry, "must be an object", "give name and one of resourceClaimName, resourceClaimTemplateName"))
            continue
        unknown = sorted(set(entry) - {"name", "resourceClaimName", "resourceClaimTemplateName"})
        if strict and unknown:
            errors.append(
                FieldError(
                    f"{at}.{unknown[0]}", entry[unknown[0]], "unknown field", "use only name, resourceClaimName, resourceClaimTemplateName"
                )
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            errors.append(
                FieldError(f"{at}.name", name, "Required value", "name the claim as the pods' spec.resourceClaims entry names it")
            )
        elif len(name) > 63 or not _DNS_LABEL.match(name):
            errors.append(
                FieldError(f"{at}.name", name, "must be a DNS label (lower case letters, digits, '-', at most 63)", "e.g. fabric")
            )
        elif name in seen:
            errors.append(FieldError(f"{at}.name", name, "Duplicate value", "give each shared claim a name of its own"))
        else:
            seen.add(name)
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k) is not None]
        if len(sources) != 1:
            errors.append(
                FieldError(
                    at,
                    sources,
                    "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
                    "name an existing ResourceClaim or a ResourceClaimTemplate, not both",
                )
            )
            continue
        (source,) = sources
        target = entry[source]
        if not isinstance(target, str) or len(target) > 253 or not _DNS_SUBDOMAIN.match(target):
            errors.append(
                FieldError(f"{at}.{source}", target, "must be a DNS subdomain (an object name)", "use the object's metadata.name")
            )
            continue
        claims.append(GroupClaim(name=name, **{_SOURCE_ATTRS[source]: target}))  # type: ignore[arg-type]
    if len(errors) > before:
        return None
    return tuple(claims)


_SOURCE_ATTRS = {"resourceClaimName": "resource_claim_name", "resourceClaimTemplateName": "resource_claim_template_name"}


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
    claims = None
    if scheduling.get("resourceClaims") is not None:
        claims = group_claims(scheduling["resourceClaims"], SPEC_PATHS["resource_claims"], errors)
    if errors:
        raise GangSpecError(errors)
    key = topology[0].get("key") if topology else None
    return GangIntent(policy=policy, min_count=min_count, disruption_mode=mode, topology_key=key, resource_claims=claims or None)


POD_CLAIMS = "spec.template.spec.resourceClaims"


def validate_group_claims(
    intent: GangIntent,
    pod_claims: list[dict[str, Any]],
    parallelism: int | None,
    completions: int | None,
    paths: dict[str, str] = ANNOTATION_PATHS,
) -> None:
    """What a group claim needs of the Job around it: the gang policy, members that use it by the same source, and
    few enough members to name them all in the claim's status.reservedFor."""
    claims = intent.resource_claims
    if not claims:
        return
    path = paths["resource_claims"]
    errors: list[FieldError] = []
    if intent.policy != "gang":
        errors.append(
            FieldError(
                path, [c.name for c in claims], "claims shared by the group need the gang policy", "use the `gang` policy or remove them"
            )
        )
    by_name = {e.get("name"): (j, e) for j, e in enumerate(pod_claims)}
    for i, claim in enumerate(claims):
        if claim.name not in by_name:
            errors.append(
                FieldError(
                    f"{path}[{i}].name",
                    claim.name,
                    f"no entry of {POD_CLAIMS} has this name, so no member would use the claim",
                    f"add {json.dumps(claim.wire())} to {POD_CLAIMS} (and to the containers that use it), or remove it here",
                )
            )
            continue
        j, entry = by_name[claim.name]
        own = {k: entry[k] for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k) is not None}
        if own != claim.source():
            errors.append(
                FieldError(
                    f"{POD_CLAIMS}[{j}]",
                    entry,
                    f"has the name of the group's claim {path}[{i}] but another source, so each pod would get a claim of its own",
                    f"give it the group's source {json.dumps(claim.source())}, or rename it",
                )
            )
    limit, limited_by = capacity(parallelism, completions)
    if limit > MAX_RESERVED_FOR:
        errors.append(
            FieldError(
                f"spec.{limited_by}",
                limit,
                f"must not be greater than {MAX_RESERVED_FOR} with {path}: a group claim is reserved for every member, "
                f"and a claim's status.reservedFor holds at most {MAX_RESERVED_FOR}",
                f"lower it to {MAX_RESERVED_FOR} or less, or give each pod a claim of its own",
            )
        )
    if errors:
        raise GangSpecError(errors)


def validate(intent: GangIntent, parallelism: int | None, completions: int | None = None, paths: dict[str, str] = ANNOTATION_PATHS) -> None:
    """Rules for one Job on create (and for the new state on update); `paths` name each setting as the user wrote it."""
    errors: list[FieldError] = []
    if intent.min_count is not None:
        limit, limited_by = capacity(parallelism, completions)
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
        elif intent.min_count > limit:
            errors.append(
                FieldError(
                    paths["min_count"],
                    intent.min_count,
                    f"must not be greater than {limited_by} ({limit})",
                    f"lower it to at most {limit} or raise spec.{limited_by}",
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


def validate_scale(min_count: int, parallelism: int | None, completions: int | None) -> None:
    """A gang Job scaled below its minCount would never form again: the field the user changed is named."""
    limit, limited_by = capacity(parallelism, completions)
    if min_count > limit:
        raise GangSpecError(
            [
                FieldError(
                    f"spec.{limited_by}",
                    limit,
                    f"must not be less than the gang's minCount ({min_count})",
                    f"keep it at {min_count} or more, or lower the minCount first",
                )
            ]
        )


def validate_update(old: GangIntent | None, new: GangIntent | None, paths: dict[str, str] = ANNOTATION_PATHS) -> None:
    """Everything is immutable except minCount, as upstream."""
    if old == new:
        return
    if old is None or new is None:
        raise GangSpecError(
            [
                FieldError(
                    paths["policy"],
                    new.policy if new else None,
                    "gang scheduling cannot be added to or removed from an existing Job",
                    "delete and recreate the Job",
                )
            ]
        )
    errors = [
        FieldError(paths[attr], _shown(getattr(new, attr)), "field is immutable", "delete and recreate the Job to change it")
        for attr in ("policy", "disruption_mode", "topology_key", "resource_claims")
        if getattr(old, attr) != getattr(new, attr)
    ]
    if errors:
        raise GangSpecError(errors)


def contradictions(annotated: GangIntent, spec: GangIntent) -> list[FieldError]:
    """Both spellings given: each field set in both must agree."""
    errors = []
    pairs = (
        ("policy", POLICY),
        ("min_count", MIN_COUNT),
        ("disruption_mode", DISRUPTION_MODE),
        ("topology_key", TOPOLOGY_KEY),
        ("resource_claims", RESOURCE_CLAIMS),
    )
    for attr, key in pairs:
        path = SPEC_PATHS[attr]
        a, s = _shown(getattr(annotated, attr)), _shown(getattr(spec, attr))
        if a is not None and s is not None and a != s:
            errors.append(FieldError(annotation_path(key), a, f"contradicts {path} ({json.dumps(s)})", "set the value in one place only"))
    return errors


def _shown(value: Any) -> Any:
    """A setting as the user wrote it: group claims as upstream's list."""
    if isinstance(value, tuple):
        return [c.wire() for c in value]
    return value


def _is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))
