"""Where a gang preemption is carried out: the nomination recorded, the freed devices kept, the victims evicted.

The victims come from the pure planner (`planner.preemption`); this module
only acts, in an order that survives a crash at any point:
1. record the nomination in PodGroup `status.nomination` (every victim pod by
   uid, the devices their going frees) before the first eviction, so a
   restarted operator evicts exactly those and no other;
2. keep the freed devices from kube-scheduler with NoSchedule
   DeviceTaintRules (purpose `nominated`): once a victim's claim is
   deallocated the scheduler would otherwise hand its device to any pending
   pod, and the preemptor would have evicted for nothing;
3. evict the victims through the Eviction API, each with a DisruptionTarget
   condition and an Event naming the preemptor.
The loop then plans the preemptor as usual; it reserves the freed devices
(Phalanx writes allocations itself, so its own taints do not stop it), and
`finish` gives the devices back and forgets the nomination.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from phalanx.api import schema, times
from phalanx.crashpoints import crash_point
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.planner import Preemption
from phalanx.scheduling import accessors, disruption, metrics, teardown
from phalanx.scheduling.accessors import consuming_ids, may_run, nominated_devices
from phalanx.scheduling.holes import Holes

logger = logging.getLogger(__name__)

PREEMPTED = disruption.PREEMPTED


def intruders(nomination: schema.Nomination, claims: Iterable[Mapping[str, Any]], preemptor: Collection[str]) -> list[Mapping[str, Any]]:
    """Claims that took a device this nomination holds, for pods that are neither its victims nor the preemptor's
    members (`preemptor`: their uids). A DeviceTaintRule holds a device only against requests that do not tolerate
    its taint; one that tolerates every taint (`operator: Exists`) is allocated it by kube-scheduler all the same."""
    held = set(nominated_devices(nomination))
    victims = {v.uid for v in nomination.victims}
    out = []
    for claim in claims:
        users = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"}
        if held & set(consuming_ids(claim) or ()) and users and not users & (victims | set(preemptor)):
            out.append(claim)
    return out


class Preemptor:
    def __init__(self, kube: Kube, view: ClusterView, nominated: Holes) -> None:
        self.kube = kube
        self.view = view
        self.nominated = nominated

    async def start(self, pod_group: Mapping[str, Any], preemption: Preemption, why: str) -> schema.Nomination:
        nomination = schema.Nomination(
            victims=[schema.PodRef(namespace=p.namespace, name=p.name, uid=p.uid) for p in preemption.pods],
            devices=sorted({"/".join(d) for p in preemption.pods for d in p.devices}),
            nodes=sorted(preemption.fits.nodes),
            nominated_at=times.stamp(),
        )
        await self.record(pod_group, nomination)
        crash_point("nomination.after-record")
        await self.nominated.cover(nominated_devices(nomination), why)
        crash_point("nomination.after-taints")
        metrics.PREEMPTION_VICTIMS.observe(len(nomination.victims))
        metrics.PREEMPTION_DISRUPTIONS.labels(preemptor="podgroup").observe(len(preemption.victims))
        await self.evict(nomination, why)
        return nomination

    def remaining(self, nomination: schema.Nomination) -> list[dict[str, Any]]:
        """Victims that still run or may (going or not): the nomination holds until none does. A victim that has
        stopped is done with its devices even while a finalizer keeps its pod object."""
        out = []
        for ref in nomination.victims:
            pod = self.view.pods.get(ref.namespace, ref.name)
            if pod is not None and pod["metadata"]["uid"] == ref.uid and may_run(pod):
                out.append(pod)
        return out

    async def evict(self, nomination: schema.Nomination, why: str) -> list[str]:
        """Evict the recorded victims that still stand (again after a restart, or after a budget refused); returns those refused."""
        standing = [p for p in self.remaining(nomination) if not p["metadata"].get("deletionTimestamp")]
        return await teardown.evict_all(self.kube, standing, reason=PREEMPTED, message=why)

    async def finish(self, pod_group: Mapping[str, Any], nomination: schema.Nomination) -> None:
        await self.nominated.uncover(nominated_devices(nomination))
        await self.record(pod_group, None)

    async def record(self, pod_group: Mapping[str, Any], nomination: schema.Nomination | None) -> None:
        body = nomination.wire() if nomination is not None else None
        await self.kube.merge_patch(accessors.path(pod_group, status=True), {"status": {"nomination": body}})
