"""Where a claim's allocation is cleared, and the one rule every clearing obeys: never while a user may run.

Phalanx clears allocations in three places (a release rolled back and the idle claims of a gang torn down, both by
`undo`; the claims of a torn-down gang's members once they stop), each deciding from the watch which claims are idle. The
watch can be seconds behind: after an API server restart it shows a member still gated that kube-scheduler has
since bound, and a claim cleared then leaves a running container on a device the next plan hands to someone
else. So the last word is a fresh read of every pod the claim is reserved for or owned by, as upstream's
resourceclaim controller double-checks with the API server before it drops a consumer it does not know. A user
that may still run keeps the claim; the resourceclaim controller frees it once that user is done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys, schema
from phalanx.kube.client import Conflict, Kube, NotFound, all_answered, claim_path, pod_path
from phalanx.scheduling.accessors import allocated_ids, may_run
from phalanx.scheduling.outcome import ReleaseAborted

logger = logging.getLogger(__name__)


async def in_use(kube: Kube, claim: Mapping[str, Any]) -> list[str]:
    """The claim's users that may still run, read afresh: the pods in `reservedFor` and the pod that owns it. A
    consumer that is not a pod cannot be judged here and counts as running."""
    meta = claim["metadata"]
    pods: set[tuple[str, str]] = set()
    others = []
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("resource") == "pods" and not ref.get("apiGroup"):
            pods.add((ref["name"], ref["uid"]))
        else:
            others.append(f"{ref.get('resource')}/{ref.get('name')}")
    pods |= {(o["name"], o["uid"]) for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod" and o.get("apiVersion") == "v1"}

    async def running(name: str, uid: str) -> str | None:
        pod = await kube.get(pod_path(meta["namespace"], name))
        return name if pod is not None and pod["metadata"]["uid"] == uid and may_run(pod) else None

    found = await all_answered(running(name, uid) for name, uid in sorted(pods))
    return sorted(others + [name for name in found if name is not None])


async def clear(kube: Kube, claim: Mapping[str, Any], *, unprotect: bool = False) -> bool:
    """Clear the allocation and `reservedFor` (status), conditional on `claim` as read, then with `unprotect` take
    off the delete-protection finalizer (metadata), conditional on the version the first write left. False, with
    nothing written, while a user may still run. A lost race raises `Conflict`, a claim gone `NotFound`."""
    meta = claim["metadata"]
    running = await in_use(kube, claim)
    if running:
        logger.info(
            "%s/%s: allocation kept, %s may still run; freed by the resourceclaim controller once done",
            meta["namespace"],
            meta["name"],
            ", ".join(running),
        )
        return False
    freed = await kube.merge_patch(
        claim_path(meta["namespace"], meta["name"], status=True),
        {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {"allocation": None, "reservedFor": None}},
    )
    finalizers = freed["metadata"].get("finalizers") or []
    if unprotect and keys.DELETE_PROTECTION in finalizers:
        others = [f for f in finalizers if f != keys.DELETE_PROTECTION]
        await kube.merge_patch(
            claim_path(meta["namespace"], meta["name"]),
            {"metadata": {"resourceVersion": freed["metadata"]["resourceVersion"], "finalizers": others or None}},
        )
    return True


async def undo(kube: Kube, namespace: str, claims: Iterable[schema.ClaimReservation]) -> None:
    """Clear each claim's allocation if it is still exactly the one the reservation wrote and none of its users may
    run (`clear`); a concurrent change is read again and judged again."""

    async def one(claim: schema.ClaimReservation) -> None:
        mine = {(r.driver, r.pool, r.device) for r in claim.results}
        for _ in range(5):
            obj = await kube.get(claim_path(namespace, claim.name))
            held = set(allocated_ids(obj) or ()) if obj else set()
            if obj is None or obj["metadata"]["uid"] != claim.uid or not held or not held <= mine:
                return
            try:
                await clear(kube, obj)
                return
            except NotFound:
                return
            except Conflict:
                continue
        raise ReleaseAborted(f"claim {claim.name} kept changing while its allocation was being undone")

    await all_answered(one(c) for c in claims)
