"""Where a group is taken down as a unit: its members evicted, marked once each eviction is accepted.

Every member taken down carries a `DisruptionTarget` condition, so a Job
with a `podFailurePolicy` rule `{action: Ignore, onPodConditions: [{type:
DisruptionTarget}]}` does not count it against `backoffLimit`; only a member
actually being taken down is marked, or a member left running by a refused
eviction would have its later real failures ignored. A member that runs goes
through the Eviction API, so PodDisruptionBudgets are honoured (a refusal is
retried by the caller on its next cycle); the API server marks it as it
accepts the eviction, and Phalanx then puts its own reason on that mark. A
member that never ran (never bound) is marked Failed first, as the pod
garbage collector marks an unscheduled pod it deletes, so its Job replaces it
at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.crashpoints import crash_point
from phalanx.kube.client import ApiError, Conflict, Kube, NotFound, Throttled, pod_path
from phalanx.scheduling import conditions, metrics

logger = logging.getLogger(__name__)


def _condition(reason: str, message: str) -> dict[str, Any]:
    return {
        "type": keys.DISRUPTION_TARGET,
        "status": "True",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": conditions.now(),
    }


async def evict(kube: Kube, pod: Mapping[str, Any], *, reason: str, message: str) -> bool:
    """Take one pod down; True when it is gone or going, False when a disruption budget refused (try again later)."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return True
    mark = {"metadata": {"uid": meta["uid"]}, "status": {"conditions": [_condition(reason, message)]}}
    try:
        if not pod["spec"].get("nodeName"):
            never_ran = {"phase": "Failed", "reason": reason, "message": message[:1024]}
            await kube.strategic_patch(
                pod_path(meta["namespace"], meta["name"], "status"), {**mark, "status": {**mark["status"], **never_ran}}
            )
            await kube.evict(meta["namespace"], meta["name"], meta["uid"])
        else:
            await kube.evict(meta["namespace"], meta["name"], meta["uid"])
            # the API server marked it (EvictionByEvictionAPI) as it accepted: the mark says why, in Phalanx's words
            await kube.strategic_patch(pod_path(meta["namespace"], meta["name"], "status"), mark)
    except (NotFound, Conflict):
        return True  # gone, or replaced by a pod of the same name: not ours to take down
    except Throttled as exc:
        logger.warning("eviction of %s/%s refused for now: %s", meta["namespace"], meta["name"], exc.message)
        return False
    crash_point(f"evicted.{reason}")
    metrics.EVICTIONS.labels(reason=reason).inc()
    await kube.event({"apiVersion": "v1", "kind": "Pod", "metadata": meta}, type_="Warning", reason=reason, message=message)
    return True


async def evict_all(kube: Kube, pods: list[Mapping[str, Any]], *, reason: str, message: str) -> list[str]:
    """Evict concurrently; returns the names of pods still standing (refused)."""
    done = await asyncio.gather(*(evict(kube, p, reason=reason, message=message) for p in pods), return_exceptions=True)
    standing = []
    for pod, result in zip(pods, done, strict=True):
        if isinstance(result, ApiError):
            logger.warning("eviction of %s failed: %s", pod["metadata"]["name"], result)
            standing.append(pod["metadata"]["name"])
        elif isinstance(result, BaseException):
            raise result
        elif not result:
            standing.append(pod["metadata"]["name"])
    return standing
