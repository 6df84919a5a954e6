"""The LeaderWorkerSet controller: every replica of a gang LWS gets its Workload and PodGroup, as a gang Job does.

Watched only where LWS's CRD is installed (Kopf starts the watch when the CRD
appears); level-triggered and idempotent, sharing the Job controller's event
handling, resync and `reconcile` (`owners.controller`), once per replica. A
replica added by a scale-up gets its objects on the LWS's update; a replica
scaled away keeps them (no member is left to wait, so it holds nothing), and a
scale-up that brings it back finds them; the LWS's deletion takes them all.
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.kube.client import Kube, NotFound
from phalanx.leaderworkersets import objects
from phalanx.owners.controller import is_gang, on_event, resync_all

GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"


@kopf.on.event(GROUP, VERSION, PLURAL, when=is_gang)
async def lws_event(type: str | None, body: Any, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await on_event(type, body, memo, logger, objects.from_lws)


async def resync(kube: Kube, logger: Any) -> int:
    """Every gang LWS once, as a new leader; nothing to do where LWS is not installed."""
    try:
        return await resync_all(kube, f"/apis/{GROUP}/{VERSION}/{PLURAL}", objects.from_lws, logger)
    except NotFound:
        return 0
