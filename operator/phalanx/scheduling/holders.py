"""Who holds what a waiting group is short of: the cause behind a shortage, for `explain`.

A shortage says how much is missing; a user needs to know whose work holds
it and at what priority, to decide whether to wait, free it, or outrank it.
Pure, from the objects `explain` read: devices of a short DeviceClass are
traced through the claims holding them to the pods using them, node
resources to the placed pods requesting them, and each pod to its unit (the
owner of its gang, else its controller, else itself).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.planner.model import Device
from phalanx.planner.placement import Shortage
from phalanx.scheduling import accessors, inputs

JSON = Mapping[str, Any]
SHOWN = 3
"""Holders named per resource; the rest are counted."""


@dataclass(frozen=True)
class Holder:
    resource: str
    unit: str
    """`namespace/name` of the owner of a gang (or controller, or pod) whose pods hold it."""
    held: int
    total: int
    priority: int
    """The highest priority among the unit's pods holding it: what a preemptor must outrank."""


def unit_of(
    pod_groups: Iterable[JSON], pods_of: Mapping[str, Sequence[JSON]], owner: Callable[[JSON], str | None]
) -> Callable[[JSON], str]:
    """pod -> its unit's name: the owner of its gang (`owner` names it), else its controller, else the pod itself."""
    job_of: dict[str, str] = {}
    for group in pod_groups:
        job = owner(group) or group["metadata"]["name"]
        for pod in pods_of.get(group["metadata"]["uid"], ()):
            job_of[pod["metadata"]["uid"]] = f"{group['metadata']['namespace']}/{job}"

    def unit(pod: JSON) -> str:
        meta = pod["metadata"]
        if meta["uid"] in job_of:
            return job_of[meta["uid"]]
        owner = next((r["name"] for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        return f"{meta['namespace']}/{owner or meta['name']}"

    return unit


def _rows(resource: str, total: int, amounts: Mapping[str, int], priorities: Mapping[str, int]) -> list[Holder]:
    ranked = sorted(amounts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [Holder(resource, unit, held, total, priorities[unit]) for unit, held in ranked]


def of_devices(
    shortage: Shortage, devices: Sequence[Device], claims: Iterable[JSON], pods: Iterable[JSON], unit: Callable[[JSON], str], mine: set[str]
) -> list[Holder]:
    """Holders of the short class's devices (`devices`: every device of the class), by the pods their claims are
    reserved for; a claim reserved for nobody is its own holder. The group's own members (`mine`, uids) are left out."""
    ids = {d.id for d in devices}
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    amounts: dict[str, int] = defaultdict(int)
    priorities: dict[str, int] = defaultdict(lambda: -(2**31))
    for claim in claims:
        taken = ids & set(accessors.consuming_ids(claim) or ())
        if not taken:
            continue
        users = [
            by_uid[r["uid"]]
            for r in (claim.get("status") or {}).get("reservedFor") or []
            if r.get("resource") == "pods" and r["uid"] in by_uid
        ]
        if any(u["metadata"]["uid"] in mine for u in users):
            continue
        name = unit(users[0]) if users else f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        amounts[name] += len(taken)
        priorities[name] = max([priorities[name], *(int(u["spec"].get("priority") or 0) for u in users)])
    return _rows(shortage.resource, shortage.total, amounts, priorities)


def of_node_resource(shortage: Shortage, pods: Iterable[JSON], unit: Callable[[JSON], str], mine: set[str]) -> list[Holder]:
    """Holders of a node resource: the placed, live pods requesting it."""
    amounts: dict[str, int] = defaultdict(int)
    priorities: dict[str, int] = defaultdict(lambda: -(2**31))
    for pod in pods:
        if not accessors.bound(pod) or accessors.terminal(pod) or pod["metadata"]["uid"] in mine:
            continue
        amount = inputs.pod_requests(pod).get(shortage.resource, 0)
        if amount > 0:
            name = unit(pod)
            amounts[name] += amount
            priorities[name] = max(priorities[name], int(pod["spec"].get("priority") or 0))
    return _rows(shortage.resource, shortage.total, amounts, priorities)
