"""Where a double allocation is found, and which holder yields.

Two allocators share the devices (kube-scheduler and Phalanx) and nothing
upstream coordinates them (kubernetes#128980). kube-scheduler counts a
device once however many claims hold it, so once one holder is gone it
believes the device free while the other still holds it: every double
allocation must be undone, not only those that involve a gang.

Sharing is not conflict: a result with `adminAccess` consumes nothing, and a
device with `allowMultipleAllocations` is over-committed only when the
capacity its holders consume exceeds what it has. When a device really is
held twice, the later allocation yields. Which came first is the order of the
writes that allocated them, as the claims watch delivered them
(`AllocationOrder`: by resourceVersion); a claim allocated before the
operator started came before those. Between claims of unknown order (both
allocated before it started), `allocationTimestamp` or else the time of the
status write that owns the allocation (managedFields) decides, to the second.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys
from phalanx.crashpoints import crash_point
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.planner import quantity
from phalanx.planner.model import ClaimKey, DeviceId
from phalanx.scheduling import accessors, metrics, teardown
from phalanx.scheduling.accessors import consuming_ids
from phalanx.scheduling.holes import Holes
from phalanx.scheduling.teardown import TearDown

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Conflict:
    device: DeviceId
    keep: Mapping[str, Any]
    """The holder that allocated first."""
    later: tuple[Mapping[str, Any], ...]
    """Holders that allocated after it: each of them yields."""


def key(claim: Mapping[str, Any]) -> ClaimKey:
    return (claim["metadata"]["namespace"], claim["metadata"]["name"])


def reserved_claims(pod_groups: Iterable[Mapping[str, Any]]) -> dict[ClaimKey, Mapping[str, Any]]:
    """Claim -> the PodGroup whose recorded reservation names it."""
    out: dict[ClaimKey, Mapping[str, Any]] = {}
    for pod_group in pod_groups:
        for claim in ((pod_group.get("status") or {}).get("reservation") or {}).get("claims") or []:
            out[(pod_group["metadata"]["namespace"], claim["name"])] = pod_group
    return out


def allocated_at(claim: Mapping[str, Any]) -> str:
    """When the allocation was written, to the second: its `allocationTimestamp` where the allocator set one, else the
    newest status write that owns `status.allocation` (RFC 3339, sorts as text)."""
    stamped = ((claim.get("status") or {}).get("allocation") or {}).get("allocationTimestamp")
    if stamped:
        return stamped
    times = [
        entry.get("time", "")
        for entry in claim["metadata"].get("managedFields") or []
        if entry.get("subresource") == "status" and "f:allocation" in ((entry.get("fieldsV1") or {}).get("f:status") or {})
    ]
    return max(times, default=claim["metadata"].get("creationTimestamp", ""))


def shareable_capacity(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceId, dict[str, int]]:
    """Devices that allow multiple allocations, with their capacity in exact integers."""
    out: dict[DeviceId, dict[str, int]] = {}
    for s in slices:
        spec = s["spec"]
        for device in spec.get("devices") or []:
            if device.get("allowMultipleAllocations"):
                capacity = {name: quantity.amount("", c["value"]) for name, c in (device.get("capacity") or {}).items()}
                out[(spec["driver"], spec["pool"]["name"], device["name"])] = capacity
    return out


def _consumed(claim: Mapping[str, Any], device: DeviceId) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
        if (r["driver"], r["pool"], r["device"]) == device and not r.get("adminAccess"):
            for name, value in (r.get("consumedCapacity") or {}).items():
                out[name] += quantity.amount("", value)
    return out


def _fits(holders: list[Mapping[str, Any]], device: DeviceId, capacity: Mapping[str, int]) -> bool:
    total: dict[str, int] = defaultdict(int)
    for claim in holders:
        for name, value in _consumed(claim, device).items():
            total[name] += value
    return all(value <= capacity.get(name, 0) for name, value in total.items())


def double_allocations(
    claims: Iterable[Mapping[str, Any]],
    shareable: Mapping[DeviceId, Mapping[str, int]],
    order: Callable[[str], int | None] = lambda _: None,
) -> list[Conflict]:
    """Every device held beyond what it allows, with the holders that came later; `order`: the resourceVersion of
    the write that allocated a claim (by uid), where the watch saw it."""

    def first(claim: Mapping[str, Any]) -> tuple[Any, ...]:
        seen = order(claim["metadata"]["uid"])
        return (seen is not None, seen or 0, allocated_at(claim), claim["metadata"].get("creationTimestamp", ""), key(claim))

    holders: dict[DeviceId, list[Mapping[str, Any]]] = defaultdict(list)
    for claim in claims:
        for device in set(consuming_ids(claim) or ()):
            holders[device].append(claim)
    out = []
    for device, held_by in holders.items():
        if len(held_by) < 2:
            continue
        ordered = sorted(held_by, key=first)
        capacity = shareable.get(device)
        if capacity is not None:
            kept = []
            for claim in ordered:
                if _fits([*kept, claim], device, capacity):
                    kept.append(claim)
            later = tuple(c for c in ordered if c not in kept)
            if later:
                out.append(Conflict(device, kept[0], later))
            continue
        out.append(Conflict(device, ordered[0], tuple(ordered[1:])))
    return out


class Repair:
    """The action: each device held beyond what it allows is given back by the holder that allocated later (a gang
    of ours torn down as a unit, any other holder's pods evicted), the device covered meanwhile so nobody else takes
    it. Run first in every cycle."""

    def __init__(self, kube: Kube, view: ClusterView, holes: Holes, tear_down: TearDown) -> None:
        self.kube = kube
        self.view = view
        self.holes = holes
        self.tear_down = tear_down
        self._counted: set[tuple[DeviceId, str]] = set()
        """(device, claim uid) of double allocations already counted: a conflict takes cycles to end, it counts once."""
        self._evicting: dict[str, float] = {}
        """Pod uid -> not before: an eviction already sent is not sent again until then."""
        self._no_conflicts: tuple[Any, ...] | None = None
        """The claims' and slices' `written` when the last repair found no device held beyond what it allows."""

    def forget(self, pods: Container[str], now: float) -> None:
        """What is remembered of claims and pods that are gone, and evictions no longer pending."""
        if self._counted:
            claims = {c["metadata"]["uid"] for c in self.view.claims.items()}
            self._counted = {(device, uid) for device, uid in self._counted if uid in claims}
        if self._evicting:
            self._evicting = {uid: until for uid, until in self._evicting.items() if uid in pods and until > now}

    async def __call__(self, groups: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
        """Each device held beyond what it allows is given back by the holder that allocated later."""
        await self.holes.sweep(self.view.claims.items())
        judged = (self.view.claims.written, self.view.slices.written)
        if judged == self._no_conflicts:
            return  # the claims and slices found without a conflict, unchanged since
        conflicts = double_allocations(self.view.claims.items(), shareable_capacity(self.view.slices.items()), self.view.allocations.get)
        self._no_conflicts = None if conflicts else judged
        reserved = reserved_claims(self.view.groups.items()) if conflicts else {}
        members_of = {g["metadata"]["uid"]: pods for g, pods in groups} if conflicts else {}
        for conflict in conflicts:
            device = "/".join(conflict.device)
            await self.holes.cover([conflict.device], f"held by {accessors.name(conflict.keep)} and {len(conflict.later)} later claim(s)")
            crash_point("repair.after-cover")
            kept = reserved.get(key(conflict.keep))
            kept_by = (
                f"gang {accessors.name(kept)}" if kept else f"claim {accessors.namespace(conflict.keep)}/{accessors.name(conflict.keep)}"
            )
            for later in conflict.later:
                if (conflict.device, later["metadata"]["uid"]) not in self._counted:
                    self._counted.add((conflict.device, later["metadata"]["uid"]))
                    metrics.CONFLICTS.labels(stage="after-release").inc()
                gang = reserved.get(key(later))
                if gang is not None:
                    record = accessors.reservation(gang)
                    if record is not None and record.state == "Released":
                        why = f"device {device} was allocated to {kept_by} before this gang's reservation; ours yields"
                        if await self.tear_down(gang, members_of.get(gang["metadata"]["uid"], []), record, why):
                            metrics.REPAIRS.labels(action="teardown").inc()
                    continue
                await self.evict_holders(later, f"device {device} is held by {kept_by}, which allocated it first")

    async def evict_holders(self, claim: Mapping[str, Any], why: str, reason: str = keys.DOUBLE_ALLOCATED) -> None:
        """The pods using a claim that holds a device it must give up (allocated second, or taken from a preemptor):
        evicted, never deleted, with an Event naming the device."""
        namespace = accessors.namespace(claim)
        uids = {c["uid"] for c in (claim.get("status") or {}).get("reservedFor") or [] if c.get("resource") == "pods"}
        uids |= {o["uid"] for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"}
        now = time.monotonic()
        for pod in self.view.pods.items():
            uid = pod["metadata"]["uid"]
            if accessors.namespace(pod) != namespace or uid not in uids or self._evicting.get(uid, 0.0) > now:
                continue
            logger.warning("evicting %s/%s: %s", namespace, accessors.name(pod), why)
            gone = await teardown.evict(self.kube, pod, reason=reason, message=f"claim {accessors.name(claim)}: {why}")
            if gone:
                metrics.REPAIRS.labels(action="eviction").inc()
            self._evicting[uid] = now + (30.0 if gone else 5.0)
