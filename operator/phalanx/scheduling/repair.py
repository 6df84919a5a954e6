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

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.planner import quantity
from phalanx.planner.model import ClaimKey, DeviceId
from phalanx.scheduling.accessors import consuming_ids


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
