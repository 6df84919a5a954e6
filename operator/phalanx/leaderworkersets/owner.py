"""LeaderWorkerSets behind the owner seam (`owners.seam.OwnerKind`): each replica of a gang LWS one group.

LWS's controller makes a replica's pods through two StatefulSets (the
leader's, owned by the LWS, and the replica's workers', owned by its leader
pod), so a pod names its LWS and its replica only by the labels LWS puts on it
(`leaderworkerset.sigs.k8s.io/name`, `/group-index`). The member key is the
LWS's name and the replica's index, within the pod's namespace, as a user's
PodGroup keys its members by name (`podgroups.owner`): a pod is taken as a
member when it carries both labels and is controlled by a StatefulSet. A
replica's PodGroup carries the same two (the job-name label Phalanx sets on
every group, and the group-index label) and is controlled by the LWS.

LWS has no suspend and never finishes: its state is always Active while it
lives. A replica scaled away reads as gone (its members are deleted by their
StatefulSet, which loses nothing).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.kube.client import Kube
from phalanx.leaderworkersets import admission
from phalanx.owners.controlling import Controlling
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]
KEY_PREFIX = "leaderworkerset:"


def member_key(name: str, replica: str) -> str:
    return f"{KEY_PREFIX}{name}/{replica}"


class LeaderWorkerSets(Controlling):
    kind = admission.KIND
    api_version = admission.API_VERSION
    plural = "leaderworkersets"

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        """The replica's key for a group the LWS controls; None for anything else (a pod is controlled by a StatefulSet)."""
        labels = obj["metadata"].get("labels") or {}
        name, replica = labels.get(keys.JOB_NAME_LABEL), labels.get(admission.GROUP_INDEX_LABEL)
        if name is None or replica is None or self.controller_uid(obj) is None:
            return None
        return member_key(name, replica)

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        name, replica = labels.get(admission.NAME_LABEL), labels.get(admission.GROUP_INDEX_LABEL)
        made_by_a_set = any(r.get("kind") == "StatefulSet" and r.get("controller") for r in meta.get("ownerReferences") or [])
        return (member_key(name, replica),) if name and replica is not None and made_by_a_set else ()

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        """The LWS, while it lives and still runs the group's replica (a replica scaled away reads as gone)."""
        owner = await super().read(kube, pod_group)
        replica = (pod_group["metadata"].get("labels") or {}).get(admission.GROUP_INDEX_LABEL, "")
        if owner is None or not replica.isdigit() or int(replica) >= admission.groups(owner):
            return None
        return owner

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        """No suspend, no end: an LWS's replicas run until it is scaled down or deleted (`read` says gone)."""
        return OwnerState.ACTIVE

    def size(self, owner: Mapping[str, Any]) -> tuple[int | None, int | None]:
        """One replica's pods at once (the leader and its workers); it completes none."""
        return admission.size(dict(owner)), None

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """The leader first, then its workers by index."""
        meta = pod["metadata"]
        index = (meta.get("labels") or {}).get(admission.WORKER_INDEX_LABEL, "")
        return (int(index) if index.isdigit() else 1 << 30, meta.get("creationTimestamp", ""), meta["name"])

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        """The replica's pods its StatefulSets have yet to create (the workers' only once its leader exists)."""
        if owner is None:
            return None
        wanted = admission.size(owner)
        if live >= wanted:
            return None
        return f"{live} of the replica's {wanted} pods exist; the LeaderWorkerSet's StatefulSets create the other {wanted - live}"


LEADERWORKERSETS = LeaderWorkerSets()
