"""The seam for the workload kind: what the loop and explain need of a group's owner, one adapter per kind.

Kueue's jobframework pattern: one generic loop, a small interface per kind
(`jobs.owner` for the Job kind). The loop finds a group's members and its
owner through it, asks it whether the owner suspended or finished, reads the
minCount it says now, and names it on Events; explain asks it how to order
the members and what the owner owes. Nothing else under `scheduling/` or
`planner/` knows a kind. `Kinds` puts several behind the one seam.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping
from typing import Any, Protocol, cast

from phalanx.kube.client import Kube, NotFound
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]


class OwnerKind(Protocol):
    kind: str
    """The owner's kind, in the words the user's messages use."""

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        """The uid of the object's (a pod's, a PodGroup's) controller of this kind; None for another's."""
        ...

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        """The owners of this kind whose group the pod is a member of, if they have one."""
        ...

    def name(self, pod_group: Mapping[str, Any]) -> str | None:
        """The name of the group's owner, as the group records it."""
        ...

    def list_path(self, namespace: str) -> str:
        """Where the namespace's owners of this kind are listed (explain reads them once)."""
        ...

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        """The group's owner as the API server has it now; None when it is gone, replaced or being deleted."""
        ...

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        """Whether the owner was suspended since the group's release (`released_at`), finished, or goes on."""
        ...

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        """The minCount the owner says now (a raised one reaches its PodGroup a moment after its new pods); None if
        it says none."""
        ...

    def ref(self, pod_group: Mapping[str, Any]) -> JSON | None:
        """The owner as an Event's involved object; None when the group does not name it."""
        ...

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """The order members are listed in (a replacement follows the member it replaces)."""
        ...

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        """What the owner's status says of the members it has yet to create, and when (None: it owes none)."""
        ...


class Kinds:
    """Several workload kinds behind the one seam: each group answers to the kind that controls it.

    A pod may be a member through more than one kind (a JobSet's pod is its Job's too); which group it is in is the
    group's to say, so `member_uids` gives every kind's and the group's owner picks.
    """

    def __init__(self, *kinds: OwnerKind) -> None:
        self.kinds = kinds
        self.kind = " or ".join(k.kind for k in kinds)

    def of(self, pod_group: Mapping[str, Any]) -> OwnerKind | None:
        return next((k for k in self.kinds if k.owner_uid(pod_group)), None)

    def _by_kind(self, owner: Mapping[str, Any]) -> OwnerKind:
        return next(k for k in self.kinds if k.kind == owner.get("kind"))

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        return next((uid for k in self.kinds if (uid := k.owner_uid(obj))), None)

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(uid for k in self.kinds for uid in k.member_uids(pod))

    def name(self, pod_group: Mapping[str, Any]) -> str | None:
        kind = self.of(pod_group)
        return kind.name(pod_group) if kind else None

    def list_paths(self, namespace: str) -> list[str]:
        return [k.list_path(namespace) for k in self.kinds]

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        kind = self.of(pod_group)
        return await kind.read(kube, pod_group) if kind else None

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        return self._by_kind(owner).state(owner, released_at)

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        return self._by_kind(owner).min_count(owner)

    def ref(self, pod_group: Mapping[str, Any]) -> JSON | None:
        kind = self.of(pod_group)
        return kind.ref(pod_group) if kind else None

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        kind = next((k for k in reversed(self.kinds) if k.member_uids(pod)), self.kinds[0])
        return kind.member_order(pod)

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        kind = self.of(pod_group)
        return kind.pods_owed(owner, pod_group, live, now) if kind else None


async def list_owners(kube: Kube, kinds: Kinds, namespace: str) -> list[JSON]:
    """Every owner of the namespace, of every kind this cluster serves (a kind whose CRD is not installed has none)."""
    owners: list[JSON] = []
    for path in kinds.list_paths(namespace):
        with contextlib.suppress(NotFound):
            owners += cast(JSON, await kube.request("GET", path)).get("items") or []
    return owners
