"""The Job admission webhooks, served by Kopf, decided by `phalanx.admission`."""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api.intent import GangSpecError
from phalanx.jobs import admission, podclaims
from phalanx.jobs.webhook_rules import MUTATE_ID, POD_MUTATE_ID, VALIDATE_ID
from phalanx.owners.webhooks import merge_into


@kopf.on.mutate("batch", "v1", "jobs", id=MUTATE_ID, operations=["CREATE", "UPDATE"])
def mutate_job(body: Any, old: Any, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    try:
        mutation = admission.mutate_job(
            dict(body),
            dict(old) if old is not None else None,
            gang_default_mode=memo.config.gang_disruption_mode,
            field_dropped=memo.config.job_scheduling_dropped,
        )
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None
    merge_into(patch, mutation.patch)
    warnings.extend(mutation.warnings)


@kopf.on.validate("batch", "v1", "jobs", id=VALIDATE_ID, operations=["CREATE", "UPDATE"])
def validate_job(body: Any, old: Any, **_: Any) -> None:
    try:
        admission.validate_job(dict(body), dict(old) if old is not None else None)
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None


@kopf.on.mutate("", "v1", "pods", id=POD_MUTATE_ID, operations=["CREATE"])
def mutate_pod(body: Any, patch: kopf.Patch, **_: Any) -> None:
    """A gang member's entry that names its group's claim is pointed at that claim (`podclaims`)."""
    try:
        mutation = podclaims.mutate_pod(dict(body))
    except (GangSpecError, ValueError) as exc:
        raise kopf.AdmissionError(str(exc), code=422) from None
    merge_into(patch, mutation.patch)
