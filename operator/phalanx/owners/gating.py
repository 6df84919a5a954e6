"""The PodsGated condition of a gang's PodGroup, which the owners' controller owns, and its lifting once the gang is
released.

PodsGated says whether the gang's members wait behind Phalanx's gate. The owners' controller writes it True when it
makes the gang's objects, and False once the release loop marked the gang released. It learns of that release from
the PodGroups' watch (`Lifted`), not from the owner's next event: an owner's event is judged on the informer's copy
of its PodGroup, so it cannot tell a release the copy does not show yet. Every write is conditional on the
resourceVersion it was judged on: a copy behind the server never writes a stale state over a newer one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from phalanx.api import keys
from phalanx.kube.client import Conflict, Kube, NotFound
from phalanx.kube.informers import ClusterView, Informer, Key, key_of
from phalanx.scheduling import conditions

logger = logging.getLogger("phalanx.owners")

NOT_GATED_MESSAGE = (
    "the {kind}'s pod template lacks the scheduling gate {gate}: it was admitted without Phalanx's webhook "
    "(webhook not installed, namespace excluded, or bypassed), so its pods are scheduled one by one and may "
    "deadlock; delete and recreate the {kind} to get gang scheduling"
)
RETRY_AFTER = 1.0
"""Seconds before a lift that failed (other than for a newer version or a deletion) is tried again."""


def gating_condition(gated: bool, pod_group: dict[str, Any], kind: str = "Job") -> dict[str, Any]:
    """PodsGated: True while the group waits behind the gate, False once the loop released it whole (or when the
    template was never gated). Level-triggered: a group torn down and admitted again is gated again."""
    generation = pod_group["metadata"].get("generation")
    if not gated:
        return conditions.condition(
            keys.GATED, False, keys.PODS_NOT_GATED, NOT_GATED_MESSAGE.format(kind=kind, gate=keys.SCHEDULING_GATE), generation
        )
    scheduled = conditions.find(pod_group, keys.INITIALLY_SCHEDULED) or {}
    if scheduled.get("status") == "True" or scheduled.get("reason") == keys.RELEASED:
        message = f"the whole group was placed and {keys.SCHEDULING_GATE} lifted from its members; later members are released as they fit"
        return conditions.condition(keys.GATED, False, keys.GATES_LIFTED, message, generation)
    message = f"pods are held by {keys.SCHEDULING_GATE} until the group can be placed"
    return conditions.condition(keys.GATED, True, "Gated", message, generation)


def update(gated: bool, pod_group: dict[str, Any], kind: str = "Job") -> dict[str, Any] | None:
    """The PodsGated condition to write on `pod_group`, or None when it already reads so."""
    existing = (pod_group.get("status") or {}).get("conditions") or []
    merged = conditions.merged(existing, gating_condition(gated, pod_group, kind))
    if merged is None:
        return None
    (current,) = [c for c in merged if c["type"] == keys.GATED]
    return current


async def write(kube: Kube, kind: str, key: Key, condition: dict[str, Any], resource_version: str | None = None) -> None:
    """PodsGated on the group `key` of `kind` (a PodGroup, or a CompositePodGroup), under the owners' field manager;
    with `resource_version`, only while the group is at that version (else Conflict)."""
    await kube.apply_status(kind, *key, {"conditions": [condition]}, keys.JOB_CONTROLLER, resource_version=resource_version)


def lifting(pod_group: dict[str, Any]) -> dict[str, Any] | None:
    """PodsGated False for a group the watch shows released while its PodsGated still says gated; None otherwise (a
    group that waits, one never gated, one whose PodsGated is not written yet: its owner's reconcile writes it)."""
    if (conditions.find(pod_group, keys.GATED) or {}).get("status") != "True":
        return None
    return update(True, pod_group)


class Lifted:
    """Told by the PodGroups' and CompositePodGroups' watches of every write, it marks each group shown released
    whose PodsGated still says gated; the leader's `run` writes those False. A group is marked again by each write
    the watch shows while it is due, and by a relist, so a lift that lost to a newer version, or that a former
    leader never wrote, is written from the newest copy."""

    def __init__(self, view: ClusterView) -> None:
        self.marked: dict[tuple[str, Key], None] = {}
        """(kind, key) of the groups due, in the order marked."""
        self._wake = asyncio.Event()
        self._stores: dict[str, Informer] = {"PodGroup": view.podgroups, keys.COMPOSITE_KIND: view.composites}
        for kind, informer in self._stores.items():
            informer.listen("lifted", lambda k=kind: _Told(self, k))  # type: ignore[misc]

    def mark(self, kind: str, key: Key) -> None:
        self.marked[(kind, key)] = None
        self._wake.set()

    async def run(self, kube: Kube) -> None:
        """Until cancelled (the Lease lost): each group marked lifted, as the informer has it now."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            due, self.marked = list(self.marked), {}
            await asyncio.gather(*(self._lift(kube, kind, key) for kind, key in due))

    async def _lift(self, kube: Kube, kind: str, key: Key) -> None:
        group = self._stores[kind].get(*key)
        condition = lifting(group) if group is not None else None
        if group is None or condition is None:
            return
        try:
            await write(kube, kind, key, condition, group["metadata"]["resourceVersion"])
        except (Conflict, NotFound):
            return  # the watch brings the newer version (marked again while still due) or the deletion
        except Exception as exc:  # a refusal or a broken connection: tried again, never given up
            logger.warning("PodsGated of %s %s/%s not lifted (%s): trying again", kind, *key, exc)
            asyncio.get_running_loop().call_later(RETRY_AFTER, self.mark, kind, key)


class _Told:
    """One store's listener (`Informer.listen`) for `Lifted`."""

    def __init__(self, lifted: Lifted, kind: str) -> None:
        self._lifted = lifted
        self._kind = kind

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        if after is not None and lifting(after) is not None:
            self._lifted.mark(self._kind, key_of(after))

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        for obj in store.values():
            self.put(None, obj)
