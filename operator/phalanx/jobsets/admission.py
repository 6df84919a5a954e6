"""JobSet admission, as pure functions: one gang over every pod of every Job the JobSet makes.

The JobSet carries the gang intent in the same annotations as a Job. On
create, every replicated Job's pod template gets the scheduling gate and the
template label, so whichever Job JobSet's controller makes from it, and
whenever (a restart of the JobSet makes them all again), its pods wait for
Phalanx. The group's size is the JobSet's: the sum over its replicated Jobs of
replicas x parallelism. A JobSet of roles (`jobsets.roles`) has its templates
labelled by role too, and its gang is each role's minimum together.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import FieldError, GangIntent, GangSpecError, Mode, from_annotations
from phalanx.api.naming import template_name
from phalanx.jobs import admission as job_admission  # a replicated Job's template is a Job's: its rules
from phalanx.jobsets import roles as jobset_roles
from phalanx.owners import admission as owner_admission

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"


@dataclass(frozen=True)
class Size:
    """How many pods the JobSet runs at once, and how many it ever completes, over all its replicated Jobs."""

    parallelism: int
    completions: int | None


def replicated_jobs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return list((jobset.get("spec") or {}).get("replicatedJobs") or [])


def _job_spec(rjob: dict[str, Any]) -> dict[str, Any]:
    return (rjob.get("template") or {}).get("spec") or {}


def _pod_spec(rjob: dict[str, Any]) -> dict[str, Any]:
    return (_job_spec(rjob).get("template") or {}).get("spec") or {}


def _running(rjob: dict[str, Any]) -> int:
    """The pods a replicated Job runs at once: replicas x parallelism (at most its completions)."""
    spec = _job_spec(rjob)
    p, c = spec.get("parallelism", 1), spec.get("completions")
    return rjob.get("replicas", 1) * (min(p, c) if c is not None else p)


def sizes(jobset: dict[str, Any]) -> dict[str, int]:
    """The pods each replicated Job runs at once, by name, in the JobSet's order (a role's default minimum)."""
    return {str(r.get("name")): _running(r) for r in replicated_jobs(jobset)}


def size(jobset: dict[str, Any]) -> Size:
    completions = 0
    bounded = True
    for rjob in replicated_jobs(jobset):
        c = _job_spec(rjob).get("completions")
        if c is None:
            bounded = False
        else:
            completions += rjob.get("replicas", 1) * c
    return Size(sum(_running(r) for r in replicated_jobs(jobset)), completions if bounded else None)


def roles(jobset: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """(replicated Job, its minimum) of a JobSet of roles (`jobsets.roles`); () for a JobSet of one gang."""
    return jobset_roles.roles(jobset, sizes(jobset))


def gated(jobset: dict[str, Any]) -> bool:
    """Every replicated Job's pod template carries the gate: one ungated template would run its pods one by one."""
    rjobs = replicated_jobs(jobset)
    return bool(rjobs) and all(keys.SCHEDULING_GATE in (g.get("name") for g in _pod_spec(r).get("schedulingGates") or []) for r in rjobs)


def priority_class_name(jobset: dict[str, Any]) -> str | None:
    names = {_pod_spec(r).get("priorityClassName") for r in replicated_jobs(jobset)}
    return next(iter(names)) if len(names) == 1 else None


@dataclass(frozen=True)
class Mutation:
    jobset: dict[str, Any]
    """The JobSet as admitted (a copy): the webhook hands Kopf the whole object, which diffs it into a JSON patch."""
    warnings: tuple[str, ...] = ()


def mutate_jobset(jobset: dict[str, Any], old: dict[str, Any] | None, *, gang_default_mode: Mode) -> Mutation:
    """Normalise the intent into annotations; on create, gate and label every replicated Job's pod template."""
    out = copy.deepcopy(jobset)
    metadata = out.setdefault("metadata", {})
    intent = from_annotations(metadata.get("annotations"))
    if intent is None:
        _refuse_unknown_keys(jobset, old)
        return Mutation(out)
    previous = from_annotations(((old or {}).get("metadata") or {}).get("annotations"))
    if old is None:
        intent = intent.with_default_mode(gang_default_mode)
    elif previous is not None and intent.disruption_mode is None:
        intent = replace(intent, disruption_mode=previous.disruption_mode)
    _check(jobset, old, previous, intent)
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **intent.to_annotations()}
    if old is not None:
        return Mutation(out)
    warnings: list[str] = []
    by_role = jobset_roles.requested(out) is not None
    for i, rjob in enumerate(replicated_jobs(out)):
        _gate(rjob, metadata.get("name"), by_role)
        at = f"spec.replicatedJobs[{i}].template."
        warnings += [
            f"replicated Job {rjob.get('name')}: {w}"
            for w in job_admission.teardown_warnings(rjob.get("template") or {}, owner="JobSet", at=at)
        ]
    return Mutation(out, tuple(warnings))


def _gate(rjob: dict[str, Any], jobset_name: str | None, by_role: bool) -> None:
    """The gate, the template label when the name is known (a JobSet created with generateName has none yet), and in
    a JobSet of roles the role label (the replicated Job's name), by which each pod is counted in its role."""
    pod = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
    gates = pod.setdefault("spec", {}).setdefault("schedulingGates", [])
    if keys.SCHEDULING_GATE not in (g.get("name") for g in gates):
        gates.append({"name": keys.SCHEDULING_GATE})
    labels = pod.setdefault("metadata", {}).setdefault("labels", {})
    if jobset_name:
        labels[keys.TEMPLATE_LABEL] = template_name(jobset_name)
    if by_role:
        labels[keys.ROLE_LABEL] = str(rjob.get("name"))


def validate_jobset(jobset: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise GangSpecError when the JobSet's gang intent breaks a rule, or its gate was taken off a template."""
    intent = from_annotations((jobset.get("metadata") or {}).get("annotations"))
    previous = from_annotations(((old or {}).get("metadata") or {}).get("annotations")) if old is not None else None
    if old is not None and previous is not None and gated(old) and not gated(jobset):
        raise GangSpecError(
            [
                FieldError(
                    "spec.replicatedJobs[*].template.spec.template.spec.schedulingGates",
                    None,
                    f"the scheduling gate {keys.SCHEDULING_GATE} must stay on every pod template of a gang JobSet",
                    "keep it: Phalanx lifts it from each pod once the whole gang can be placed",
                )
            ]
        )
    if intent is not None or previous is not None:
        _check(jobset, old, previous, intent)
    else:
        _refuse_unknown_keys(jobset, old)


def _refuse_unknown_keys(jobset: dict[str, Any], old: dict[str, Any] | None) -> None:
    """A typo alone (`mincount`) asks for no gang: the JobSet would run ungated without a word; so do roles alone."""
    errors = owner_admission.unknown_key_errors(jobset, old, keys.JOBSET_ANNOTATIONS)
    added = keys.ROLE_MIN_COUNTS in ((jobset.get("metadata") or {}).get("annotations") or {})
    if added and keys.ROLE_MIN_COUNTS not in (((old or {}).get("metadata") or {}).get("annotations") or {}):
        errors.append(
            FieldError(
                jobset_roles.PATH,
                jobset["metadata"]["annotations"][keys.ROLE_MIN_COUNTS],
                "roles alone ask for no gang: the JobSet's pods would run one by one",
                f"add {keys.POLICY}: gang beside it",
            )
        )
    if errors:
        raise GangSpecError(errors)


def _check(jobset: dict[str, Any], old: dict[str, Any] | None, previous: GangIntent | None, intent: GangIntent | None) -> None:
    errors = owner_admission.owner_errors(jobset, old, previous, intent, "JobSet", keys.JOBSET_ANNOTATIONS)
    if errors is None:
        return
    errors += jobset_roles.errors(jobset, intent, sizes(jobset))
    if old is not None and (moved := jobset_roles.changed(jobset, old, sizes(jobset))) is not None:
        errors.append(moved)
    for i, rjob in enumerate(replicated_jobs(jobset)):
        own = sorted(
            k for k in ((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {} if k.startswith(keys.ANNOTATION_PREFIX)
        )
        if own:
            errors.append(
                FieldError(
                    f"spec.replicatedJobs[{i}].template.metadata.annotations",
                    own,
                    "a replicated Job of a gang JobSet asks for a gang of its own, so its pods would be in two groups",
                    "remove them: the JobSet's annotations make one gang of all its Jobs",
                )
            )
        if (two := owner_admission.two_groups(rjob, "JobSet", "template.spec.template")) is not None:
            errors.append(replace(two, path=f"spec.replicatedJobs[{i}].{two.path}"))
    order = ((jobset.get("spec") or {}).get("startupPolicy") or {}).get("startupPolicyOrder")
    if order == "InOrder" and intent.policy == "gang":
        errors.append(
            FieldError(
                "spec.startupPolicy.startupPolicyOrder",
                order,
                "JobSet's controller makes each replicated Job only once the one before runs, but a gang runs only "
                "once all its pods exist: the JobSet would wait for ever",
                "use AnyOrder (the default) or remove the startupPolicy",
            )
        )
    one = owner_admission.one_priority(
        {_pod_spec(r).get("priorityClassName") for r in replicated_jobs(jobset)},
        "spec.replicatedJobs[*].template.spec.template.spec.priorityClassName",
        "its replicated Jobs",
        "give every replicated Job's pod template the same priorityClassName",
    )
    errors += [one] if one else []
    total = size(jobset).parallelism
    errors += owner_admission.sized_by_owner(
        intent,
        total,
        f"the pods the JobSet runs at once ({total}: replicas x parallelism, summed over spec.replicatedJobs)",
        "raise a replicated Job's replicas or parallelism",
    )
    if errors:
        raise GangSpecError(errors)
