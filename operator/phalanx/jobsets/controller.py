"""The JobSet controller: every gang JobSet gets its Workload and PodGroup, as a gang Job does.

Watched only where JobSet's CRD is installed (Kopf starts the watch when the
CRD appears); level-triggered and idempotent like the Job controller, whose
`reconcile` it shares.
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.jobs.controller import reconcile
from phalanx.jobsets import objects
from phalanx.kube.client import ApiError, Kube, NotFound

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def _is_gang_jobset(annotations: Any, **_: Any) -> bool:
    return any(k in (annotations or {}) for k in keys.INTENT_ANNOTATIONS)


@kopf.on.event(GROUP, VERSION, PLURAL, when=_is_gang_jobset)
async def jobset_event(type: str | None, body: Any, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    if not memo.elector.leading:
        return
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return
    jobset = dict(body)
    try:
        source = objects.from_jobset(jobset)
    except GangSpecError as exc:
        ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet", "metadata": jobset["metadata"]}
        await memo.kube.event(ref, type_="Warning", reason="InvalidGangSpec", message=str(exc))
        return
    if source is not None:
        await reconcile(memo.kube, source, logger)


async def resync(kube: Kube, logger: Any) -> int:
    """Reconcile every gang JobSet once, as a new leader; nothing to do where JobSet is not installed."""
    done = 0
    try:
        async for page in kube.pages(f"/apis/{GROUP}/{VERSION}/{PLURAL}"):
            for jobset in page.get("items") or []:
                if not _is_gang_jobset(jobset["metadata"].get("annotations")) or jobset["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    source = objects.from_jobset(jobset)
                    if source is not None:
                        await reconcile(kube, source, logger)
                        done += 1
                except (GangSpecError, ApiError) as exc:
                    logger.warning(f"resync of JobSet {jobset['metadata']['namespace']}/{jobset['metadata']['name']}: {exc}")
    except NotFound:
        pass  # JobSet is not installed
    return done
