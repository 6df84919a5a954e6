"""What the loop writes of a group for its users to read: the two conditions it owns, the member counts, and Events.

Every write of the loop's conditions goes through `condition`, as one server-side apply under the loop's field
manager carrying every condition the loop owns (an apply that left one out would drop it); what was written is
remembered (`memory`), so a second write of the same state costs nothing. Events name the PodGroup and, when another
object owns it, that owner too, where `kubectl describe job` shows them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys, schema
from phalanx.kube.client import Kube, all_answered
from phalanx.owners.seam import OwnerKind
from phalanx.scheduling import accessors, composites, conditions
from phalanx.scheduling.memory import Memory

logger = logging.getLogger("phalanx.scheduling.loop")

LOOP_CONDITIONS = (keys.INITIALLY_SCHEDULED, keys.DISRUPTION_TARGET)
"""The conditions the loop owns (the Job controller owns PodsGated)."""
COUNTS_EVERY = 1.0
"""Seconds between two writes of a group's counts."""


class Status:
    def __init__(self, kube: Kube, memory: Memory, owner: OwnerKind) -> None:
        self.kube = kube
        self.memory = memory
        self.owner = owner

    async def counters(self, pod_group: Mapping[str, Any], members: int, bound: int, late: int) -> dict[str, Any] | None:
        """status.members, .bound and .lateMembers (members behind the gate of a group already placed: a Job's
        replacements, a labelled pod created after the release), written at most every COUNTS_EVERY. Returns the
        PodGroup as written (None: nothing written), so the visit's later conditional writes (a release's record)
        start from its version, not the watch's older copy, which would conflict and cost a read and a retry."""
        uid = pod_group["metadata"]["uid"]
        current = pod_group.get("status") or {}
        remembered = self.memory.of(uid)
        counts = {"members": members, "bound": bound, "lateMembers": late}
        if all(current.get(k, 0 if k == "lateMembers" else None) == v for k, v in counts.items()):
            remembered.counts_due = False
            return None
        now = time.monotonic()
        if now - remembered.counts_at < COUNTS_EVERY:
            remembered.counts_due = True  # the loop wakes for it when due
            return None
        remembered.counts_at = now
        remembered.counts_due = False
        answer = await self.kube.merge_patch(accessors.path(pod_group, status=True), {"status": counts})
        return composites.as_written(pod_group, answer)

    async def scheduled(
        self, pod_group: dict[str, Any], ok: bool, reason: str, message: str, *, warn: bool = False, readmit: bool = False
    ) -> None:
        await self.condition(pod_group, keys.INITIALLY_SCHEDULED, ok, reason, message, warn=warn, readmit=readmit)

    async def condition(
        self, pod_group: dict[str, Any], type_: str, ok: bool, reason: str, message: str, *, warn: bool = False, readmit: bool = False
    ) -> None:
        """Set one of the loop's conditions; every condition this loop owns goes in the same apply, or the others would be dropped."""
        uid = pod_group["metadata"]["uid"]
        mine = self.memory.of(uid).conditions
        existing = [mine.get(c["type"], c) for c in (pod_group.get("status") or {}).get("conditions") or []]
        existing += [c for t, c in mine.items() if t not in {e["type"] for e in existing}]
        new = conditions.condition(type_, ok, reason, message, pod_group["metadata"].get("generation"))
        merged = conditions.merged(existing, new, readmit=readmit)
        if merged is None:
            return
        logger.info(
            "%s/%s: %s=%s %s %s", pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], type_, new["status"], reason, message
        )
        owned = [c for c in merged if c["type"] in LOOP_CONDITIONS]
        await self.kube.apply_status(
            accessors.kind(pod_group),
            pod_group["metadata"]["namespace"],
            pod_group["metadata"]["name"],
            {"conditions": owned},
            keys.SCHEDULING_LOOP,
        )
        mine.update({c["type"]: c for c in owned})
        if warn or (ok and type_ == keys.INITIALLY_SCHEDULED):
            await self.event(pod_group, "Warning" if warn else "Normal", reason, message)

    async def event(self, pod_group: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        refs = [{"apiVersion": schema.API_VERSION, "kind": accessors.kind(pod_group), "metadata": pod_group["metadata"]}]
        owner = self.owner.ref(pod_group)
        if owner is not None and owner["metadata"].get("uid") != pod_group["metadata"]["uid"]:  # a group its own owner
            refs.append(owner)
        await all_answered(self.kube.event(ref, type_=type_, reason=reason, message=message) for ref in refs)
