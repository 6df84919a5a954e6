"""The admission webhooks the PodGroup kind (a user's own) asks for: pods labelled into a PodGroup (an
objectSelector on the label alone, so no other pod waits for Phalanx) and the user's PodGroups whose
`scheduling.phalanx.dev/*` annotations change."""

from __future__ import annotations

from phalanx.api.keys import GROUP, JOB_NAME_LABEL, VERSION
from phalanx.owners.webhook_config import ANNOTATIONS_CHANGED, NEW, Hook, rule

MUTATE_ID = "pod-group-member"
VALIDATE_ID = "podgroup-validate"


MATCH_CONDITION = (
    f"!(has(object.metadata.labels) && '{JOB_NAME_LABEL}' in object.metadata.labels) && "
    f"(request.operation == 'CREATE' ? size({NEW}) > 0 : {ANNOTATIONS_CHANGED})"
)
"""A user's PodGroup created with `scheduling.phalanx.dev/*` annotations, or updated to change them; the groups
Phalanx makes for Jobs and JobSets (their annotations copied from an owner already checked) never wait for it."""

HOOKS = (
    Hook("pods-group-member", MUTATE_ID, rule("", "v1", "pods", "CREATE"), mutating=True, labelled=True),
    Hook(
        "podgroups-validate",
        VALIDATE_ID,
        rule(GROUP, VERSION, "podgroups", "CREATE", "UPDATE"),
        mutating=False,
        condition=("phalanx-annotations", MATCH_CONDITION),
    ),
)
