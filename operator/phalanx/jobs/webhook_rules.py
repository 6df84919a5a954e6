"""The admission webhooks the Job kind asks for: its Jobs (mutate and validate), and the pods of a gang Job that
shares group claims (`jobs.podclaims`)."""

from __future__ import annotations

from phalanx.api.keys import RESOURCE_CLAIMS, SCHEDULING_GATE
from phalanx.owners.webhook_config import ANNOTATIONS_CHANGED, NEW, OLD, Hook, rule

MUTATE_ID = "job-gang-mutate"
VALIDATE_ID = "job-gang-validate"
POD_MUTATE_ID = "pod-group-claims"


def _parallelism(obj: str) -> str:
    return f"(has({obj}.spec.parallelism) ? {obj}.spec.parallelism : 1)"


def _completions(obj: str) -> str:
    return f"(has({obj}.spec.completions) ? {obj}.spec.completions : -1)"


def _gated(obj: str) -> str:
    return (
        f"(has({obj}.spec.template.spec.schedulingGates) && "
        f"{obj}.spec.template.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}'))"
    )


MATCH_CONDITION = (
    "request.operation == 'CREATE' ? "
    f"(size({NEW}) > 0 || has(object.spec.scheduling)) : "
    "(!has(object.metadata.deletionTimestamp) && ("
    f"{ANNOTATIONS_CHANGED} || "
    f"(size({OLD}) > 0 && ({_parallelism('object')} != {_parallelism('oldObject')} || "
    f"{_completions('object')} != {_completions('oldObject')} || {_gated('object')} != {_gated('oldObject')})) || "
    "has(object.spec.scheduling) != has(oldObject.spec.scheduling) || "
    "(has(object.spec.scheduling) && object.spec.scheduling != oldObject.spec.scheduling)))"
)
"""Only gang Jobs being created, and updates that touch gang settings, the size of a gang
Job or its template's gate, reach the webhooks. Anything else, including the garbage
collector removing finalizers from a Job being deleted, never waits for Phalanx."""

POD_MATCH_CONDITION = (
    f"has(object.metadata.annotations) && '{RESOURCE_CLAIMS}' in object.metadata.annotations && "
    f"has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}')"
)
"""Only a gated pod made from a gang Job's template that shares group claims reaches the pod webhook."""

JOBS = rule("batch", "v1", "jobs", "CREATE", "UPDATE")
POD_CREATE = rule("", "v1", "pods", "CREATE")
GANG_SETTINGS = ("gang-settings", MATCH_CONDITION)

HOOKS = (
    Hook("jobs-mutate", MUTATE_ID, JOBS, mutating=True, condition=GANG_SETTINGS, reinvoked=True),
    Hook("pods-group-claims", POD_MUTATE_ID, POD_CREATE, mutating=True, condition=("group-claims", POD_MATCH_CONDITION)),
    Hook("jobs-validate", VALIDATE_ID, JOBS, mutating=False, condition=GANG_SETTINGS),
)
