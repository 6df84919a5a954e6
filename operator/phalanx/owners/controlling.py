"""What the kinds share whose object controls its PodGroup (Job, JobSet): their half of the owner seam."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from phalanx.api import intent, keys
from phalanx.kube.client import Kube
from phalanx.scheduling import conditions

JSON = dict[str, Any]


class Controlling:
    """What a kind shares whose object controls its PodGroup (an ownerReference) and is named by the label Phalanx
    sets on every PodGroup (`owners.objects`): finding, reading and naming the owner, and when it was suspended."""

    kind: str
    api_version: str
    plural: str

    def controller_uid(self, obj: Mapping[str, Any]) -> str | None:
        """The uid of the object's controller of this kind (None: another kind controls it, or none)."""
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == self.kind and ref.get("controller"):
                return ref["uid"]
        return None

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        """The group's key: its controller's uid, for a kind whose object is one gang (a LeaderWorkerSet's groups
        are one per replica, and key by it)."""
        return self.controller_uid(obj)

    def name(self, pod_group: Mapping[str, Any]) -> str | None:
        return (pod_group["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL)

    def list_path(self, namespace: str) -> str:
        return f"/apis/{self.api_version}/namespaces/{namespace}/{self.plural}"

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        name = self.name(pod_group)
        owner = await kube.get(f"{self.list_path(pod_group['metadata']['namespace'])}/{name}") if name else None
        if owner is None or owner["metadata"].get("deletionTimestamp") or owner["metadata"]["uid"] != self.controller_uid(pod_group):
            return None
        return owner

    def ref(self, pod_group: Mapping[str, Any]) -> JSON | None:
        name, uid = self.name(pod_group), self.controller_uid(pod_group)
        if not (name and uid):
            return None
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": name, "namespace": pod_group["metadata"]["namespace"], "uid": uid},
        }

    def size(self, owner: Mapping[str, Any]) -> tuple[int | None, int | None]:
        """How many pods the owner runs at once, and completes in all (None: unset)."""
        raise NotImplementedError

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        with contextlib.suppress(intent.GangSpecError):
            said = intent.from_annotations(owner["metadata"].get("annotations"))
            if said is not None and said.policy == "gang":
                return said.min_count_for(*self.size(owner))
        return None

    def suspended(self, owner: Mapping[str, Any], released_at: str | None) -> bool:
        """Suspended now, or since this incarnation was released (and maybe resumed since): its controller deleted
        its pods, and whatever it creates next is a new gang, not late members."""
        condition = conditions.find(owner, "Suspended")
        return bool((owner.get("spec") or {}).get("suspend")) or bool(
            condition and released_at and (condition.get("lastTransitionTime") or "") > released_at
        )
