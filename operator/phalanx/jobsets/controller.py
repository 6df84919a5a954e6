"""The JobSet controller: every gang JobSet gets its Workload and PodGroup, as a gang Job does.

Watched only where JobSet's CRD is installed (Kopf starts the watch when the
CRD appears); level-triggered and idempotent like the Job controller, whose
event handling, resync and `reconcile` it shares (`owners.controller`).
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.jobsets import objects
from phalanx.kube.client import Kube, NotFound
from phalanx.owners.controller import is_gang, on_event, resync_all

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@kopf.on.event(GROUP, VERSION, PLURAL, when=is_gang)
async def jobset_event(type: str | None, body: Any, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await on_event(type, body, memo, logger, objects.from_jobset)


async def resync(kube: Kube, logger: Any) -> int:
    """Every gang JobSet once, as a new leader; nothing to do where JobSet is not installed."""
    try:
        return await resync_all(kube, f"/apis/{GROUP}/{VERSION}/{PLURAL}", objects.from_jobset, logger)
    except NotFound:
        return 0
