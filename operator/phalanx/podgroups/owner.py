"""A user's PodGroup behind the owner seam (`owners.seam.OwnerKind`): the group is its own owner.

Pods of any controller (or none) join a PodGroup by the label
`scheduling.phalanx.dev/pod-group: <name>`. A pod carries only the group's
name, so the member key is the name (`podgroup:<name>`), matched within the
pod's namespace as every kind's is (`accessors.pods_by_group`): no lookup of
the group's uid at pod creation, no second index. A group deleted and made
again under the same name takes the pods that name it, which is what their
label says. The pod webhook (`podgroups.webhooks`) admits the label only
when the group exists; as with a Job's pods, anyone who may create pods in
the namespace may join a group there, and waits behind its quorum.

A PodGroup Phalanx made for an owner carries the job-name label (`owners.objects`)
and answers to that owner's kind; every other PodGroup is its own.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.kube.client import Kube, custom_path
from phalanx.scheduling import accessors, composites
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]
KEY_PREFIX = "podgroup:"
COMPOSITE_PREFIX = "compositepodgroup:"


def member_key(name: str) -> str:
    return f"{KEY_PREFIX}{name}"


def composite_key(name: str) -> str:
    """The member key of a gang CompositePodGroup's pods (`scheduling.composites`): the pod webhook labels each pod
    of one of its roles with the composite's name."""
    return f"{COMPOSITE_PREFIX}{name}"


class PodGroups:
    kind = "PodGroup"

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        meta = obj["metadata"]
        if "schedulingPolicy" not in (obj.get("spec") or {}) or keys.JOB_NAME_LABEL in (meta.get("labels") or {}):
            return None  # a pod, or a group Phalanx made for an owner of another kind
        return composite_key(meta["name"]) if composites.is_composite(obj) else member_key(meta["name"])

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        labels = pod["metadata"].get("labels") or {}
        name = labels.get(keys.POD_GROUP_LABEL)
        if not name:
            return ()
        composite = labels.get(keys.COMPOSITE_LABEL)
        return (composite_key(composite),) if composite else (member_key(name),)

    def name(self, pod_group: Mapping[str, Any]) -> str | None:
        return pod_group["metadata"]["name"]

    def list_path(self, namespace: str) -> str:
        return custom_path("podgroups", namespace)

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        meta = pod_group["metadata"]
        now = await kube.get(accessors.path(pod_group))
        if now is None or now["metadata"].get("deletionTimestamp") or now["metadata"]["uid"] != meta["uid"]:
            return None
        return {**composites.as_written(pod_group, now), "kind": self.kind}

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        """A group of its own is never suspended nor finished: it goes on while it exists (its members end alone)."""
        return OwnerState.ACTIVE

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        return accessors.min_count(owner) if accessors.gang(owner) else None

    def ref(self, pod_group: Mapping[str, Any]) -> JSON | None:
        """The group itself (the loop's Events name it once, not twice)."""
        meta = pod_group["metadata"]
        kind = accessors.kind(pod_group)
        return {"apiVersion": keys.API_VERSION, "kind": kind, "metadata": {k: meta[k] for k in ("name", "namespace", "uid")}}

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """Oldest first: a bare pod has no index."""
        meta = pod["metadata"]
        return (1 << 30, meta.get("creationTimestamp", ""), meta["name"])

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        """None: nobody is known to owe the group pods (bare pods torn down are not made again; a controller's are
        its own to make)."""
        return None


PODGROUPS = PodGroups()
