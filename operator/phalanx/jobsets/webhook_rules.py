"""The admission webhooks the JobSet kind asks for: its gang JobSets, mutated and validated."""

from __future__ import annotations

from phalanx.api.keys import SCHEDULING_GATE
from phalanx.jobsets.controller import GROUP, PLURAL, VERSION
from phalanx.owners.webhook_config import ANNOTATIONS_CHANGED, NEW, OLD, Hook, rule

MUTATE_ID = "jobset-gang-mutate"
VALIDATE_ID = "jobset-gang-validate"


def _gated(obj: str) -> str:
    return (
        f"(has({obj}.spec.replicatedJobs) && {obj}.spec.replicatedJobs.all(r, has(r.template.spec.template.spec.schedulingGates) && "
        f"r.template.spec.template.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}')))"
    )


MATCH_CONDITION = (
    f"request.operation == 'CREATE' ? size({NEW}) > 0 : "
    "(!has(object.metadata.deletionTimestamp) && ("
    f"{ANNOTATIONS_CHANGED} || "
    f"(size({OLD}) > 0 && {_gated('object')} != {_gated('oldObject')})))"
)
"""Gang JobSets being created, and updates that touch their gang settings or their templates' gate."""

JOBSETS = rule(GROUP, VERSION, PLURAL, "CREATE", "UPDATE")
GANG_SETTINGS = ("gang-settings", MATCH_CONDITION)

HOOKS = (
    Hook("jobsets-mutate", MUTATE_ID, JOBSETS, mutating=True, condition=GANG_SETTINGS, reinvoked=True),
    Hook("jobsets-validate", VALIDATE_ID, JOBSETS, mutating=False, condition=GANG_SETTINGS),
)
