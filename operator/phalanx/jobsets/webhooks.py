"""The JobSet admission webhooks, served by Kopf, decided by `jobsets.admission`."""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api.intent import GangSpecError
from phalanx.jobsets import admission
from phalanx.jobsets.controller import GROUP, PLURAL, VERSION
from phalanx.jobsets.webhook_rules import MUTATE_ID, VALIDATE_ID


@kopf.on.mutate(GROUP, VERSION, PLURAL, id=MUTATE_ID, operations=["CREATE", "UPDATE"])
def mutate_jobset(body: Any, old: Any, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    try:
        mutation = admission.mutate_jobset(
            dict(body), dict(old) if old is not None else None, gang_default_mode=memo.config.gang_disruption_mode
        )
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None

    def admitted(raw: Any) -> None:
        raw.clear()
        raw.update(mutation.jobset)

    patch.fns.append(admitted)
    warnings.extend(mutation.warnings)


@kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_ID, operations=["CREATE", "UPDATE"])
def validate_jobset(body: Any, old: Any, **_: Any) -> None:
    try:
        admission.validate_jobset(dict(body), dict(old) if old is not None else None)
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None
