"""A gang JobSet of roles: each replicated Job a role with its own minimum, the JobSet still one gang.

"One launcher and at least three of the eight workers" is a minimum per replicated Job, which one minCount over the
JobSet's pods cannot say (four workers would go without their launcher). The JobSet asks for it with
`scheduling.phalanx.dev/role-min-counts: '{"launcher": 1, "workers": 3}'` beside its gang annotations; a replicated
Job it does not name needs all its pods (upstream's default for a replicated Job's gang, KEP-969). Phalanx then makes
the shape upstream gives a gang of gangs (KEP-6012): a CompositePodGroup whose gang needs every child, and one child
PodGroup per replicated Job carrying its minimum (`owners.objects`); each replicated Job's pod template carries the
role label, so the loop counts each member in its role (`scheduling.composites.role_of`).

The roles are read from the JobSet, never from the annotation alone: every replicated Job is a role, and one the
annotation does not name has its default minimum from the JobSet as it is (its replicas x parallelism now).
"""

from __future__ import annotations

import json
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import INT32_MAX, FieldError, GangIntent, GangSpecError, annotation_path

PATH = annotation_path(keys.ROLE_MIN_COUNTS)
MAX_ROLES = 8
EXAMPLE = '{"launcher": 1, "workers": 3}'


def requested(jobset: dict[str, Any]) -> dict[str, int] | None:
    """The minimums the JobSet names, by replicated Job (None: it asks for no roles). Raises GangSpecError on a value
    that is not a JSON object of whole numbers."""
    raw = ((jobset.get("metadata") or {}).get("annotations") or {}).get(keys.ROLE_MIN_COUNTS)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value:
        raise GangSpecError([FieldError(PATH, raw, "must be a JSON object of replicated Job name to minimum", f"write e.g. '{EXAMPLE}'")])
    bad = {k: v for k, v in value.items() if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT32_MAX)}
    if bad:
        raise GangSpecError(
            [
                FieldError(
                    PATH,
                    bad,
                    "each minimum must be a whole number, 0 or more",
                    f"write e.g. '{EXAMPLE}' (0: a role that goes along when it fits)",
                )
            ]
        )
    return {str(k): int(v) for k, v in value.items()}


def roles(jobset: dict[str, Any], sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """(replicated Job, its minimum) for each replicated Job, in the JobSet's order; () when it asks for no roles.
    `sizes`: the pods each replicated Job runs at once (its default minimum)."""
    named = requested(jobset)
    if named is None:
        return ()
    return tuple((name, named.get(name, size)) for name, size in sizes.items())


def errors(jobset: dict[str, Any], intent: GangIntent, sizes: dict[str, int]) -> list[FieldError]:
    """What a JobSet of roles may not say: a role that is no replicated Job, a minimum above its pods, a minCount of
    its own beside the roles' (their sum is the gang's), or roles without a gang."""
    try:
        named = requested(jobset)
    except GangSpecError as exc:
        return exc.errors
    if named is None:
        return []
    found: list[FieldError] = []
    if intent.policy != "gang":
        found.append(
            FieldError(
                PATH,
                named,
                "roles need a gang: a basic JobSet places each pod alone",
                "set scheduling.phalanx.dev/policy: gang, or remove the roles",
            )
        )
    if intent.min_count is not None:
        found.append(
            FieldError(
                annotation_path(keys.MIN_COUNT),
                intent.min_count,
                "a JobSet of roles needs each role's minimum together: their sum is the gang's minCount",
                f"remove {keys.MIN_COUNT} and say each replicated Job's minimum in {keys.ROLE_MIN_COUNTS}",
            )
        )
    unknown = sorted(set(named) - set(sizes))
    if unknown:
        found.append(
            FieldError(
                PATH, unknown, "names no replicated Job of the JobSet", f"use the names in spec.replicatedJobs[*].name: {', '.join(sizes)}"
            )
        )
    over = {name: minimum for name, minimum in named.items() if name in sizes and minimum > sizes[name]}
    if over:
        found.append(
            FieldError(
                PATH,
                over,
                "a role's minimum must not be greater than the pods its replicated Job runs at once ("
                + ", ".join(f"{name}: {sizes[name]}" for name in over)
                + ")",
                "lower it, or raise that replicated Job's replicas or parallelism",
            )
        )
    if len(sizes) > MAX_ROLES:
        found.append(
            FieldError(
                "spec.replicatedJobs",
                len(sizes),
                f"a JobSet of roles has at most {MAX_ROLES} replicated Jobs (its Workload's podGroupTemplates, as upstream's)",
                "merge replicated Jobs of the same pod template, or drop the roles and give the JobSet one minCount",
            )
        )
    if not found and sum(named.get(name, size) for name, size in sizes.items()) < 1:
        found.append(
            FieldError(
                PATH, named, "the roles' minimums sum to 0: the gang would need no pod", "give at least one role a minimum of 1 or more"
            )
        )
    return found


def changed(jobset: dict[str, Any], old: dict[str, Any], sizes: dict[str, int]) -> FieldError | None:
    """Roles asked for or dropped after creation (the pod templates were labelled by role, or not, when the JobSet was
    created, and its gang is a composite, or not, from then on), or a role moved between 0 and a minimum (its child
    PodGroup's policy, basic or gang, is immutable). Any other change of a minimum is taken, as a Job's minCount."""
    now = ((jobset.get("metadata") or {}).get("annotations") or {}).get(keys.ROLE_MIN_COUNTS)
    had = keys.ROLE_MIN_COUNTS in ((old.get("metadata") or {}).get("annotations") or {})
    if had != (now is not None):
        return FieldError(
            PATH,
            now,
            "roles can be set only when the JobSet is created (its pod templates are labelled by role then)",
            "delete and recreate the JobSet to add or remove roles; the minimums may change",
        )
    if not had:
        return None
    before, after = dict(roles(old, sizes)), dict(roles(jobset, sizes))
    moved = sorted(name for name in after if name in before and (before[name] == 0) != (after[name] == 0))
    if not moved:
        return None
    return FieldError(
        PATH,
        {name: after[name] for name in moved},
        "a role's minimum cannot move between 0 (it goes along when it fits) and 1 or more (a gang of its own) after creation",
        "keep it on the same side of 0, or delete and recreate the JobSet",
    )
