"""The Job controller: every gang Job gets its Workload and PodGroup (`owners.controller`), from its own events and,
as a new leader, from a resync of every Job."""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.jobs import objects
from phalanx.kube.client import Kube
from phalanx.owners.controller import is_gang, on_event, resync_all


@kopf.on.event("batch", "v1", "jobs", when=is_gang)
async def job_event(type: str | None, body: Any, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await on_event(type, body, memo, logger, objects.from_job)


async def resync(kube: Kube, logger: Any) -> int:
    return await resync_all(kube, "/apis/batch/v1/jobs", objects.from_job, logger)
