"""Job admission, as pure functions: what to change on a Job and what to refuse.

The mutating webhook is the only place that ever sees `spec.scheduling` on an
API server without WorkloadWithJob, so it records the field as annotations
(and says so in a warning, since the server is about to drop it), and gates
the pod template so the Job controller creates pods Phalanx holds. The
validating webhook sees the result and enforces the rules, including
immutability on update. Both refuse a key under our prefix that Phalanx does
not read, which would otherwise be ignored without a word.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import (
    ANNOTATION_PATHS,
    SPEC_PATHS,
    FieldError,
    GangIntent,
    GangSpecError,
    Mode,
    contradictions,
    from_annotations,
    from_job_scheduling,
    validate,
    validate_group_claims,
    validate_scale,
    validate_update,
)
from phalanx.api.naming import template_name
from phalanx.owners import admission
from phalanx.owners.admission import Mutation


def mutate_job(job: dict[str, Any], old: dict[str, Any] | None, *, gang_default_mode: Mode, field_dropped: bool | None) -> Mutation:
    """Normalise the gang intent into annotations; on create, gate and label the pod template.

    The rules are checked here too, where the spelling the user wrote is still
    known (`spec.scheduling` is gone by validation time), so a refusal names
    the field as written. `field_dropped` says whether this API server drops
    `spec.scheduling` (None: cannot tell), only to word the warning.
    """
    with _together(admission.unknown_key_errors(job, old)):
        return _mutate(job, old, gang_default_mode, field_dropped)


def _mutate(job: dict[str, Any], old: dict[str, Any] | None, gang_default_mode: Mode, field_dropped: bool | None) -> Mutation:
    metadata = job.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    annotated = from_annotations(annotations)
    scheduling = (job.get("spec") or {}).get("scheduling")
    from_spec = from_job_scheduling(scheduling) if scheduling else None
    intent = _merge(annotated, from_spec, old is not None)
    if intent is None:
        return Mutation()
    paths = {attr: SPEC_PATHS[attr] if _written(from_spec, attr) else path for attr, path in ANNOTATION_PATHS.items()}
    previous = from_annotations((old.get("metadata") or {}).get("annotations")) if old is not None else None
    if old is None:
        intent = intent.with_default_mode(gang_default_mode)
    elif previous is not None and intent.disruption_mode is None:
        intent = replace(intent, disruption_mode=previous.disruption_mode)
    _check(job, old, previous, intent, paths)
    patch: dict[str, Any] = {}
    wanted = intent.to_annotations()
    if any(annotations.get(k) != v for k, v in wanted.items()):
        patch["metadata"] = {"annotations": wanted}
    warnings: list[str] = []
    if old is None:
        patch["spec"] = {"template": _gated_template(job, metadata.get("name"), intent)}
        if from_spec is not None:
            warnings.append(_copied_warning(field_dropped, from_spec))
        if intent.policy == "gang":
            warnings += teardown_warnings(job)
    return Mutation(patch=patch, warnings=tuple(warnings))


def validate_job(job: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise `GangSpecError` when the Job's gang intent breaks a rule (in the portable spelling: all that is left here)."""
    with _together(admission.unknown_key_errors(job, old)):
        _validate(job, old)


def _validate(job: dict[str, Any], old: dict[str, Any] | None) -> None:
    new_intent = from_annotations((job.get("metadata") or {}).get("annotations"))
    old_intent = from_annotations((old.get("metadata") or {}).get("annotations")) if old is not None else None
    if old is not None:
        validate_update(old_intent, new_intent)
        if old_intent is not None and gated(old) and not gated(job):
            raise GangSpecError([_gate_removed(job)])
    if new_intent is not None:
        _check(job, old, old_intent, new_intent, ANNOTATION_PATHS)


def ignores_disruptions(job: dict[str, Any]) -> bool:
    """Whether a podFailurePolicy rule ignores pods with the DisruptionTarget condition Phalanx sets on every member it takes down."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    # an unset status is True (the Job API's default); a JobSet stores the Job template's unset one as ""
    return any(
        rule.get("action") == "Ignore"
        and any(
            c.get("type") == keys.DISRUPTION_TARGET and c.get("status") in (None, "", "True") for c in rule.get("onPodConditions") or []
        )
        for rule in rules
    )


def gated(job: dict[str, Any]) -> bool:
    """Whether the Job's pod template carries Phalanx's scheduling gate."""
    return keys.SCHEDULING_GATE in (g.get("name") for g in _gates(job))


def _gates(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("schedulingGates")) or [])


def _gate_removed(job: dict[str, Any]) -> FieldError:
    return FieldError(
        "spec.template.spec.schedulingGates",
        _gates(job),
        f"the scheduling gate {keys.SCHEDULING_GATE} must stay on a gang Job's pod template for the Job's whole life",
        "keep it: Phalanx lifts it from each pod once the whole gang can be placed",
    )


@contextmanager
def _together(errors: list[FieldError]) -> Iterator[None]:
    """Refuse `errors` with whatever else the block refuses, so the user fixes them in one round."""
    try:
        yield
    except GangSpecError as exc:
        raise GangSpecError([*errors, *exc.errors]) from None
    if errors:
        raise GangSpecError(errors)


def _scale(job: dict[str, Any] | None) -> tuple[int | None, int | None]:
    spec = (job or {}).get("spec") or {}
    return spec.get("parallelism"), spec.get("completions")


def _check(job: dict[str, Any], old: dict[str, Any] | None, previous: GangIntent | None, intent: GangIntent, paths: dict[str, str]) -> None:
    """The rules for the new state; when only the Job's size changed, the size is what is named."""
    if old is not None:
        validate_update(previous, intent, paths)
    parallelism, completions = _scale(job)
    resized = old is not None and _scale(old) != (parallelism, completions)
    if resized and previous is not None and intent.min_count is not None and intent.min_count == previous.min_count:
        validate_scale(intent.min_count, parallelism, completions)
    validate(intent, parallelism, completions, paths)
    validate_group_claims(intent, _pod_claims(job), parallelism, completions, paths)
    if (two := admission.two_groups(job, "Job")) is not None:
        raise GangSpecError([two])


def _pod_claims(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("resourceClaims")) or [])


def _written(spelling: GangIntent | None, attr: str) -> bool:
    if spelling is None:
        return False
    return attr == "policy" or getattr(spelling, attr) is not None


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
        resource_claims=from_spec.resource_claims or annotated.resource_claims,
    )


def _gated_template(job: dict[str, Any], job_name: str | None, intent: GangIntent) -> dict[str, Any]:
    """The gate, and the template label when the name is known: a Job created with `generateName` has none yet.

    Group claims are copied onto the template too, so the pod webhook resolves each member's entry from the pod alone.
    """
    gates = _gates(job)
    if not any(g.get("name") == keys.SCHEDULING_GATE for g in gates):
        gates.append({"name": keys.SCHEDULING_GATE})
    template: dict[str, Any] = {"spec": {"schedulingGates": gates}}
    if job_name:
        template["metadata"] = {"labels": {keys.TEMPLATE_LABEL: template_name(job_name)}}
    if intent.resource_claims:
        claims = intent.to_annotations()[keys.RESOURCE_CLAIMS]
        template.setdefault("metadata", {})["annotations"] = {keys.RESOURCE_CLAIMS: claims}
    return template


def _copied_warning(field_dropped: bool | None, from_spec: GangIntent) -> str:
    where = f"{keys.ANNOTATION_PREFIX}*"
    shared = ""
    if from_spec.resource_claims:
        names = ", ".join(c.name for c in from_spec.resource_claims)
        shared = f"; its resourceClaims ({names}) become one ResourceClaim per PodGroup, made and reserved by Phalanx"
    if field_dropped:
        return (
            "spec.scheduling is dropped silently by this API server (feature gate WorkloadWithJob is off); "
            f"Phalanx recorded it in the annotations {where} and will gang-schedule this Job{shared}"
        )
    return f"spec.scheduling was recorded by Phalanx in the annotations {where}; Phalanx gang-schedules this Job{shared}"


DISRUPTION_RULE = f"{{action: Ignore, onPodConditions: [{{type: {keys.DISRUPTION_TARGET}}}]}}"
DEFAULT_BACKOFF_LIMIT = 6
"""Upstream's, when neither backoffLimit nor backoffLimitPerIndex is set."""


SLOW_GRACE = 60
"""Seconds of terminationGracePeriodSeconds past which admission says what each teardown costs (upstream's default is 30)."""


def teardown_warnings(job: dict[str, Any], *, owner: str = "Job", at: str = "") -> list[str]:
    """What a gang Job's settings will cost it when a member is lost, each naming the field and the fix.

    Given on create only: podFailurePolicy is immutable, so an update could not act on it. Phalanx does not count the
    members it takes down with a lost one (`scheduling.teardown`): what counts is the member lost, by its Job's rules.
    `job` may be a Job template inside another `owner` (a JobSet's replicated Job), at path `at` (ending in a dot):
    each field is named there, and the fix is to recreate that owner.
    """
    warnings = [] if ignores_disruptions(job) else [_disruption_warning(job, owner, at)]
    grace = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace > SLOW_GRACE:
        warnings.append(
            f"{at}spec.template.spec.terminationGracePeriodSeconds is {grace}: each time Phalanx tears this gang down, its "
            f"members keep their devices until they stop, up to {grace} s, and the gang runs again only once it has "
            "room; lower it to what a rank needs to stop (its checkpoint)"
        )
    return warnings


def _disruption_warning(job: dict[str, Any], owner: str = "Job", at: str = "") -> str:
    """Without the rule an evicted, preempted or drained member is a failure like a failed container."""
    spec = job.get("spec") or {}
    per_index = spec.get("backoffLimitPerIndex")
    if per_index is not None:
        cost = (
            f"counts against its index's {at}spec.backoffLimitPerIndex ({per_index}) as a failed container does, and so does "
            f"a member Phalanx takes down with it whose index has failed before, so {_nth(per_index + 1)} such loss of "
            "one index fails that index"
        )
    else:
        limit = spec.get("backoffLimit")
        limit = DEFAULT_BACKOFF_LIMIT if limit is None else limit
        cost = (
            f"counts against {at}spec.backoffLimit ({limit}) as a failed container does, so {_nth(limit + 1)} such loss "
            "fails the Job (the members Phalanx takes down with it are not counted)"
        )
    restart = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
    never = "" if restart == "Never" else f" and {at}spec.template.spec.restartPolicy: Never (the policy needs it)"
    return (
        f"{at}spec.podFailurePolicy has no rule {DISRUPTION_RULE}: each member this gang loses to an eviction, a preemption "
        f"or a node drained or gone {cost}; recreate the {owner} with {at}spec.podFailurePolicy: "
        f"{{rules: [{DISRUPTION_RULE}]}}{never} "
        '(the policy is immutable; see docs/concepts.md, "When a member of a running gang is lost")'
    )


def _nth(n: int) -> str:
    if n == 1:
        return "the first"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"the {n}{suffix}"
