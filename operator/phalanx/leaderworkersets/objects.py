"""What Phalanx needs of a gang LeaderWorkerSet: one `GangSource` per replica, each its own Workload and PodGroup.

Upstream LWS's own gang design makes one PodGroup per replica; so does this.
A replica's objects are named as a Job's would be for `<lws>-<index>` (the
LWS's uid in the Workload's hash, so an LWS made again under its name never
meets its predecessor's), owned by the LWS, and labelled with LWS's own
group-index label, by which the owner seam finds the replica's pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.api import keys, naming
from phalanx.api.intent import from_annotations
from phalanx.leaderworkersets import admission
from phalanx.owners.objects import GangSource


@dataclass(frozen=True)
class ReplicaSource(GangSource):
    """One replica of an LWS as a gang owner: the LWS is the owner, the replica names the objects."""

    replica: int = 0

    def own_labels(self) -> dict[str, str]:
        return {admission.GROUP_INDEX_LABEL: str(self.replica)}

    @property
    def replica_name(self) -> str:
        return f"{self.name}-{self.replica}"

    @property
    def workload_name(self) -> str:
        return naming.workload_name(self.replica_name, self.uid)

    @property
    def template_name(self) -> str:
        return naming.template_name(self.replica_name)


def from_lws(lws: dict[str, Any]) -> list[GangSource] | None:
    """One source per replica, the ones a rolling update may surge included (their pods are gated as any other's);
    None for an LWS that does not ask for gang scheduling. Raises GangSpecError on bad annotations."""
    meta = lws["metadata"]
    intent = from_annotations(meta.get("annotations"))
    if intent is None:
        return None
    annotations = meta.get("annotations") or {}
    return [
        ReplicaSource(
            api_version=admission.API_VERSION,
            kind=admission.KIND,
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            intent=intent,
            parallelism=admission.size(lws),
            completions=None,
            priority_class_name=admission.priority_class_name(lws),
            gated=True,  # each pod is gated as it is created (`admission.mutate_pod`), not through a template
            ready_deadline=annotations.get(keys.READY_DEADLINE),
            hold_after=annotations.get(keys.HOLD_AFTER),
            replica=i,
        )
        for i in range(admission.groups(lws))
    ]
