"""Where a gang is reserved and its gates are lifted: the only side effects of a plan.

Order matters and every step is idempotent:
1. record the intent in PodGroup `status.reservation` (state Reserving);
2. for each claim: add the delete-protection finalizer (metadata), then
   write the allocation and `reservedFor` (status), conditional on the
   claim's resourceVersion so a concurrent allocator cannot be overwritten;
3. wait until our own watch shows the writes, then read every claim afresh
   from the API server: a device also held by another claim (kube-scheduler
   allocated it meanwhile; no upstream mechanism coordinates two allocators,
   kubernetes#128980) aborts the release and rolls back;
4. pin every pod to its node (required node affinity + annotation);
5. lift Phalanx's gate on every member (state Released).
A failure before 5 rolls back every claim this reservation allocated, so no
device is leaked and no pod of an incomplete group is released; a restarted
operator resumes from the recorded intent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.api import keys, schema
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.planner import Fits
from phalanx.scheduling import metrics
from phalanx.scheduling.inputs import allocated_ids

logger = logging.getLogger(__name__)


class ReleaseAborted(Exception):
    """The plan can no longer be completed; its reservation has been rolled back."""

    def __init__(self, message: str, intruders: tuple[Mapping[str, Any], ...] = ()) -> None:
        super().__init__(message)
        self.intruders = intruders
        """Claims kube-scheduler allocated with a device of ours: their pods must go too."""


def reservation_of(fits: Fits) -> schema.Reservation:
    return schema.Reservation(
        state="Reserving",
        placements=[schema.PodPlacement(name=m.name, uid=m.uid, node=n) for m, n in fits.placements],
        claims=[
            schema.ClaimReservation(
                name=c.name,
                uid=c.uid,
                node=c.node,
                results=[schema.DeviceResult(request=r.request, driver=r.driver, pool=r.pool, device=r.device) for r in c.results],
            )
            for c in fits.claims
        ],
    )


def allocation(claim: schema.ClaimReservation, config: tuple[Mapping[str, Any], ...] = ()) -> dict[str, Any]:
    """status.allocation as kube-scheduler writes it for a node-local allocation."""
    devices: dict[str, Any] = {"results": [r.wire() for r in claim.results]}
    if config:
        devices["config"] = [dict(c) for c in config]
    return {
        "devices": devices,
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [claim.node]}]}]},
    }


def pinned_affinity(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """Required node affinity that admits only `node`: set when empty, else appended to every term, as gated pods allow."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = dict(pod["spec"].get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        if pin not in (term.get("matchFields") or []):
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    affinity["nodeAffinity"] = node_affinity
    return affinity


class Releaser:
    def __init__(self, kube: Kube, view: ClusterView, *, settle: float = 0.5, observe_timeout: float = 10.0) -> None:
        self.kube = kube
        self.view = view
        self.settle = settle
        self.observe_timeout = observe_timeout

    async def release(self, pod_group: Mapping[str, Any], fits: Fits) -> None:
        """Reserve every claim of the plan, verify, pin, lift. Raises ReleaseAborted after a rollback."""
        reservation = reservation_of(fits)
        configs = {(c.namespace, c.name): c.config for c in fits.claims}
        await self._record(pod_group, reservation)
        await self.complete(pod_group, reservation, configs)

    async def release_member(self, pod_group: Mapping[str, Any], fits: Fits) -> None:
        """A late member of a group already released: same steps, without touching the group's record."""
        configs = {(c.namespace, c.name): c.config for c in fits.claims}
        await self.complete(pod_group, reservation_of(fits), configs, record=False)

    async def complete(
        self,
        pod_group: Mapping[str, Any],
        reservation: schema.Reservation,
        configs: Mapping[tuple[str, str], tuple[Mapping[str, Any], ...]] | None = None,
        *,
        record: bool = True,
    ) -> None:
        namespace = pod_group["metadata"]["namespace"]
        pods_of_claim = self._claim_users(namespace, reservation)
        try:
            for claim in reservation.claims:
                await self._reserve_claim(
                    namespace, claim, pods_of_claim.get(claim.name, []), (configs or {}).get((namespace, claim.name), ())
                )
            await self._await_observed(namespace, reservation)
            await asyncio.sleep(self.settle)
            await self._verify(namespace, reservation)
            pods = [self._pod(namespace, p) for p in reservation.placements]
            for pod, placement in zip(pods, reservation.placements, strict=False):
                await self._pin(pod, placement.node)
            await self._await_pinned(namespace, reservation)
        except ReleaseAborted as exc:
            await self.rollback(pod_group, reservation, str(exc), record=record)
            for intruder in exc.intruders:
                await self.evict_holders(intruder)
            raise
        for pod in pods:
            await self._lift_gate(pod)
        metrics.RELEASED_PODS.inc(len(pods))
        if record:
            await self._record(pod_group, reservation.model_copy(update={"state": "Released"}))

    async def rollback(self, pod_group: Mapping[str, Any], reservation: schema.Reservation, why: str, *, record: bool = True) -> None:
        """Clear every allocation this reservation made (and only those), then forget the reservation."""
        namespace = pod_group["metadata"]["namespace"]
        mine = {(r.driver, r.pool, r.device) for c in reservation.claims for r in c.results}
        for claim in reservation.claims:
            obj = await self.kube.read_claim(namespace, claim.name)
            if obj is None or obj["metadata"]["uid"] != claim.uid or not set(allocated_ids(obj) or ()) <= mine or not allocated_ids(obj):
                continue
            await self.kube.patch_claim_status(
                namespace,
                claim.name,
                {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": {"allocation": None, "reservedFor": None}},
            )
        metrics.ROLLBACKS.inc()
        logger.warning("rolled back reservation of %s/%s: %s", namespace, pod_group["metadata"]["name"], why)
        if record:
            await self._record(pod_group, None)

    async def _record(self, pod_group: Mapping[str, Any], reservation: schema.Reservation | None) -> None:
        body = reservation.wire() if reservation is not None else None
        await self.kube.patch_custom(
            "podgroups",
            pod_group["metadata"]["namespace"],
            pod_group["metadata"]["name"],
            {"status": {"reservation": body}},
            status=True,
        )

    def _claim_users(self, namespace: str, reservation: schema.Reservation) -> dict[str, list[dict[str, str]]]:
        users: dict[str, list[dict[str, str]]] = {}
        claimed = {c.name for c in reservation.claims}
        for placement in reservation.placements:
            pod = self.view.pods.get(namespace, placement.name)
            if pod is None:
                continue
            statuses = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
            for ref in pod["spec"].get("resourceClaims") or []:
                name = ref.get("resourceClaimName") or statuses.get(ref["name"])
                if name in claimed:
                    users.setdefault(name, []).append({"resource": "pods", "name": placement.name, "uid": placement.uid})
        return users

    def _pod(self, namespace: str, placement: schema.PodPlacement) -> dict[str, Any]:
        pod = self.view.pods.get(namespace, placement.name)
        if pod is None or pod["metadata"]["uid"] != placement.uid or pod["metadata"].get("deletionTimestamp"):
            raise ReleaseAborted(f"member {placement.name} is gone")
        return pod

    async def _reserve_claim(
        self, namespace: str, claim: schema.ClaimReservation, users: list[dict[str, str]], config: tuple[Mapping[str, Any], ...]
    ) -> None:
        obj = self.view.claims.get(namespace, claim.name)
        if obj is None or obj["metadata"]["uid"] != claim.uid:
            raise ReleaseAborted(f"claim {claim.name} is gone")
        wanted = tuple((r.driver, r.pool, r.device) for r in claim.results)
        current = allocated_ids(obj)
        if current is not None:
            if set(current) == set(wanted):
                return  # done before a restart
            raise ReleaseAborted(f"claim {claim.name} was allocated elsewhere meanwhile")
        try:
            if keys.DELETE_PROTECTION not in (obj["metadata"].get("finalizers") or []):
                obj = await self.kube.patch_claim(
                    namespace,
                    claim.name,
                    {
                        "metadata": {
                            "resourceVersion": obj["metadata"]["resourceVersion"],
                            "finalizers": [*(obj["metadata"].get("finalizers") or []), keys.DELETE_PROTECTION],
                        }
                    },
                )
            await self.kube.patch_claim_status(
                namespace,
                claim.name,
                {
                    "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    "status": {"allocation": allocation(claim, config), "reservedFor": users},
                },
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise ReleaseAborted(f"claim {claim.name} changed while reserving it ({exc.status})") from None
            raise

    async def _await_observed(self, namespace: str, reservation: schema.Reservation) -> None:
        deadline = time.monotonic() + self.observe_timeout
        while True:
            seen = all(allocated_ids(self.view.claims.get(namespace, c.name) or {}) for c in reservation.claims)
            if seen:
                return
            if time.monotonic() > deadline:
                raise ReleaseAborted("our claim allocations did not show up in the watch in time")
            await asyncio.sleep(0.05)

    async def _await_pinned(self, namespace: str, reservation: schema.Reservation) -> None:
        """The next plan must count these pods on their nodes: wait until the watch shows the pins."""
        deadline = time.monotonic() + self.observe_timeout
        while True:
            pods = [self.view.pods.get(namespace, p.name) for p in reservation.placements]
            if all(p is not None and (p["metadata"].get("annotations") or {}).get(keys.PINNED_NODE) for p in pods):
                return
            if time.monotonic() > deadline:
                raise ReleaseAborted("our pod pins did not show up in the watch in time")
            await asyncio.sleep(0.05)

    async def _verify(self, namespace: str, reservation: schema.Reservation) -> None:
        """A fresh read of every claim: no device of ours may be held by anyone else."""
        items = await self.kube.list_claims()
        ours = {(namespace, c.name) for c in reservation.claims}
        mine = {(r.driver, r.pool, r.device): c.name for c in reservation.claims for r in c.results}
        intruders = []
        for obj in items:
            if (obj["metadata"]["namespace"], obj["metadata"]["name"]) in ours:
                continue
            if set(allocated_ids(obj) or ()) & set(mine):
                intruders.append(obj)
        if intruders:
            metrics.CONFLICTS.labels(stage="verify").inc(len(intruders))
            names = ", ".join(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in intruders)
            raise ReleaseAborted(f"devices of this reservation were also allocated to {names}", tuple(intruders))

    async def evict_holders(self, claim: Mapping[str, Any]) -> None:
        """Delete the pods of a claim that took a device Phalanx holds.

        kube-scheduler tracks allocated devices as a set: once one holder of a
        doubly held device is deallocated it believes the device free while
        the other still holds it, and may hand it out again; the release
        loop then finds that double allocation too and evicts the newcomer.
        The pods' controllers, if they have one, recreate them.
        """
        namespace = claim["metadata"]["namespace"]
        consumers = [c for c in (claim.get("status") or {}).get("reservedFor") or [] if c.get("resource") == "pods"]
        consumers += [
            {"name": o["name"], "uid": o["uid"]} for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"
        ]
        for consumer in {c["uid"]: c for c in consumers}.values():
            if await self.kube.delete_pod(namespace, consumer["name"], consumer["uid"]):
                metrics.EVICTIONS.inc()
                logger.warning("evicted %s/%s: its claim took a device Phalanx had reserved", namespace, consumer["name"])

    async def _pin(self, pod: Mapping[str, Any], node: str) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get(keys.PINNED_NODE) == node:
            return
        try:
            await self.kube.patch_pod(
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                {
                    "metadata": {"annotations": {keys.PINNED_NODE: node}},
                    "spec": {"affinity": pinned_affinity(pod, node)},
                },
            )
        except ApiException as exc:
            if exc.status == 404:
                raise ReleaseAborted(f"member {pod['metadata']['name']} is gone") from None
            raise

    async def _lift_gate(self, pod: Mapping[str, Any]) -> None:
        gates = pod["spec"].get("schedulingGates") or []
        remaining = [g for g in gates if g.get("name") != keys.SCHEDULING_GATE]
        if len(remaining) == len(gates):
            return
        try:
            await self.kube.patch_pod(
                pod["metadata"]["namespace"], pod["metadata"]["name"], {"spec": {"schedulingGates": remaining or None}}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            logger.warning("member %s vanished while its group was released", pod["metadata"]["name"])
