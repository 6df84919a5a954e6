"""The LeaderWorkerSet admission webhooks' Kopf handlers.

The pod webhook is sent only pods that carry LWS's name label (its
configuration's objectSelector) and fails closed: a member of a gang LWS
admitted ungated would run alone. The LWS is read from the API server, not the
informers' cache (the operator keeps no cache of LWSs); a pod of an LWS that
asks for no gang, or whose LWS is gone, is admitted as it is.
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api.intent import GangSpecError
from phalanx.leaderworkersets import admission
from phalanx.leaderworkersets.controller import GROUP, PLURAL, VERSION
from phalanx.leaderworkersets.webhook_rules import MUTATE_ID, POD_ID, VALIDATE_ID
from phalanx.owners.webhooks import merge_into


@kopf.on.mutate(GROUP, VERSION, PLURAL, id=MUTATE_ID, operations=["CREATE", "UPDATE"])
def mutate_lws(body: Any, old: Any, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    try:
        mutation = admission.mutate_lws(
            dict(body), dict(old) if old is not None else None, gang_default_mode=memo.config.gang_disruption_mode
        )
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None
    merge_into(patch, mutation.patch)
    warnings.extend(mutation.warnings)


@kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_ID, operations=["CREATE", "UPDATE"])
def validate_lws(body: Any, old: Any, **_: Any) -> None:
    try:
        admission.validate_lws(dict(body), dict(old) if old is not None else None)
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None


@kopf.on.mutate("", "v1", "pods", id=POD_ID, operations=["CREATE"])
async def gate_member(body: Any, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    meta = body.get("metadata") or {}
    name = (meta.get("labels") or {}).get(admission.NAME_LABEL)
    lws = await memo.kube.get(f"/apis/{GROUP}/{VERSION}/namespaces/{meta.get('namespace')}/{PLURAL}/{name}") if name else None
    merge_into(patch, admission.mutate_pod(dict(body), lws).patch)
