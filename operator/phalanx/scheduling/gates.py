"""Where a member's gate is lifted, and where a late lift is fenced off.

A released member gets one patch: its pin to the planned node (required node affinity and the
`keys.PINNED_NODE` annotation) and its gate lifted together, conditional on the pod as read, so the API server
accepts the affinity change (the pod it updates is still gated) and a member refused is neither pinned nor
released. A rollback by a newer leader first writes every member it leaves gated (`fence`), so a deposed
leader's lift still in flight fails on the pod's resourceVersion instead of releasing one member alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from phalanx.api import keys, schema, times
from phalanx.crashpoints import crash_point
from phalanx.kube.client import ApiError, Conflict, Kube, NotFound, all_answered, pod_path, retried
from phalanx.scheduling.accessors import started
from phalanx.scheduling.outcome import NotLeading, ReleaseAborted
from phalanx.scheduling.record import pinned_affinity

logger = logging.getLogger(__name__)


async def lift(
    kube: Kube,
    pods: list[Mapping[str, Any]],
    nodes: list[str],
    *,
    still_leading: Callable[[], None],
    pinned: dict[str, str],
) -> list[tuple[str, ApiError]]:
    """Pin each member to its node and lift Phalanx's gate, in one patch per member, concurrently; returns the
    refusals (a policy, a vanished pod) by pod name."""

    async def release(pod: Mapping[str, Any], node: str, tries: int = 3) -> tuple[str, ApiError] | None:
        gates = pod["spec"].get("schedulingGates") or []
        remaining = [g for g in gates if g.get("name") != keys.SCHEDULING_GATE]
        if len(remaining) == len(gates):
            return None  # released before a restart
        meta = pod["metadata"]
        # conditional on the pod as read: a rollback by a newer leader writes every member it leaves gated, so
        # this lift, if it is late, fails instead of releasing one member with its devices undone
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "spec": {"schedulingGates": remaining or None},
        }
        affinity = pinned_affinity(pod, node)
        # an annotation alone (anyone may write one) is no pin: both it and the node affinity are checked
        if (meta.get("annotations") or {}).get(keys.PINNED_NODE) != node or pod["spec"].get("affinity") != affinity:
            patch["metadata"]["annotations"] = {keys.PINNED_NODE: node}
            patch["spec"]["affinity"] = affinity

        async def send() -> None:
            still_leading()  # before every attempt: a lift sent again after the Lease is lost is a deposed leader's
            await kube.merge_patch(pod_path(meta["namespace"], meta["name"]), patch)

        try:
            # a transient answer (429, 5xx) is no refusal: the patch is idempotent, and a gang torn down for
            # an overloaded API server would spend its Job's back-off for nothing
            await retried(send)
        except Conflict as exc:
            fresh = await kube.get(pod_path(meta["namespace"], meta["name"]))
            if fresh is None or fresh["metadata"]["uid"] != meta["uid"] or tries <= 1:
                return meta["name"], exc
            if (fresh["metadata"].get("annotations") or {}).get(keys.ROLLED_BACK) != (meta.get("annotations") or {}).get(keys.ROLLED_BACK):
                raise NotLeading(f"a newer leader undid the release of {meta['name']} meanwhile") from exc
            return await release(fresh, node, tries - 1)  # changed by someone else (a stale watch copy): lifted from a fresh read
        except ApiError as exc:
            logger.warning("release of %s/%s refused: %s", meta["namespace"], meta["name"], exc)
            return meta["name"], exc
        pinned[meta["uid"]] = node
        crash_point("reserve.mid-gates")
        return None

    # an unanswered patch (the API server gone) raises, after every other patch has had its answer: the group
    # stays Reserving and the next cycle resumes it from what the API server then shows
    results = await all_answered(release(p, n) for p, n in zip(pods, nodes, strict=True))
    return [r for r in results if r is not None]


async def fence(kube: Kube, namespace: str, reservation: schema.Reservation, still_leading: Callable[[], None]) -> set[str]:
    """Write every member still gated (`keys.ROLLED_BACK`), each conditional on the pod as read; returns the
    members found released (bound, or their gate lifted)."""

    async def write(placement: schema.PodPlacement) -> str | None:
        for _ in range(5):
            pod = await kube.get(pod_path(namespace, placement.name))
            if pod is None or pod["metadata"]["uid"] != placement.uid:
                return None
            if started(pod):
                return placement.name
            still_leading()
            try:
                await kube.merge_patch(
                    pod_path(namespace, placement.name),
                    {
                        "metadata": {
                            "resourceVersion": pod["metadata"]["resourceVersion"],
                            "annotations": {keys.ROLLED_BACK: times.micro_stamp()},
                        }
                    },
                )
                return None
            except NotFound:
                return None
            except Conflict:
                continue  # changed meanwhile (perhaps released): judged again on a fresh read
        raise ReleaseAborted(f"member {placement.name} kept changing while its release was being undone")

    return {name for name in await all_answered(write(p) for p in reservation.placements) if name is not None}
