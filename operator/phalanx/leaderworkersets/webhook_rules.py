"""The admission webhooks the LeaderWorkerSet kind asks for: its gang LWSs mutated and validated, and the pods of
any LWS gated as they are created (an objectSelector on LWS's name label, so no other pod waits for Phalanx)."""

from __future__ import annotations

from phalanx.leaderworkersets.admission import NAME_LABEL
from phalanx.leaderworkersets.controller import GROUP, PLURAL, VERSION
from phalanx.owners.webhook_config import ANNOTATIONS_CHANGED, NEW, Hook, rule

MUTATE_ID = "lws-gang-mutate"
VALIDATE_ID = "lws-gang-validate"
POD_ID = "lws-gang-member"

MATCH_CONDITION = f"request.operation == 'CREATE' ? size({NEW}) > 0 : (!has(object.metadata.deletionTimestamp) && {ANNOTATIONS_CHANGED})"
"""Gang LWSs being created, and updates that touch their gang settings."""

LWSS = rule(GROUP, VERSION, PLURAL, "CREATE", "UPDATE")
GANG_SETTINGS = ("gang-settings", MATCH_CONDITION)

HOOKS = (
    Hook("leaderworkersets-mutate", MUTATE_ID, LWSS, mutating=True, condition=GANG_SETTINGS, reinvoked=True),
    Hook("leaderworkersets-validate", VALIDATE_ID, LWSS, mutating=False, condition=GANG_SETTINGS),
    Hook("pods-lws-member", POD_ID, rule("", "v1", "pods", "CREATE"), mutating=True, labelled=True, label=NAME_LABEL),
)
"""The LWS admission webhooks, served by Kopf, decided by `leaderworkersets.admission`."""
