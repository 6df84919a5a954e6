"""Where a double allocation is found: a device held by two claims, and which holder keeps it.

Two allocators share the devices (kube-scheduler and Phalanx) and nothing
upstream coordinates them (kubernetes#128980). kube-scheduler counts a device
once however many claims hold it, so once one holder is gone it believes the
device free while the other still holds it: every double allocation must be
undone, not only those that involve a gang.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.planner.model import ClaimKey, DeviceId
from phalanx.scheduling.inputs import allocated_ids


@dataclass(frozen=True)
class Conflict:
    device: DeviceId
    keep: Mapping[str, Any]
    intruders: tuple[Mapping[str, Any], ...]

    @property
    def holders(self) -> str:
        return ", ".join(c["metadata"]["name"] for c in (self.keep, *self.intruders))


def reserved_claims(pod_groups: Iterable[Mapping[str, Any]]) -> set[ClaimKey]:
    """Claims named in a PodGroup's recorded reservation."""
    out = set()
    for pod_group in pod_groups:
        for claim in ((pod_group.get("status") or {}).get("reservation") or {}).get("claims") or []:
            out.add((pod_group["metadata"]["namespace"], claim["name"]))
    return out


def double_allocations(claims: Iterable[Mapping[str, Any]], reserved: set[ClaimKey]) -> list[Conflict]:
    """One holder keeps each device: Phalanx's reservation if there is one, else the oldest claim."""
    holders: dict[DeviceId, list[Mapping[str, Any]]] = defaultdict(list)
    for claim in claims:
        for device in allocated_ids(claim) or ():
            holders[device].append(claim)
    out = []
    for device, held_by in holders.items():
        if len(held_by) < 2:
            continue
        ordered = sorted(
            held_by,
            key=lambda c: (
                (c["metadata"]["namespace"], c["metadata"]["name"]) not in reserved,
                c["metadata"].get("creationTimestamp", ""),
                c["metadata"]["name"],
            ),
        )
        out.append(Conflict(device, ordered[0], tuple(ordered[1:])))
    return out
