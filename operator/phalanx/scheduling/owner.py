"""The seam for the workload kind: what the loop and explain need of a group's owner, one adapter per kind.

Kueue's jobframework pattern: one generic loop, a small interface per kind
(`jobs.owner` for the Job kind). The loop finds a group's members and its
owner through it, asks it whether the owner suspended or finished, reads the
minCount it says now, and names it on Events; explain asks it how to order
the members and what the owner owes. Nothing else under `scheduling/` or
`planner/` knows a kind.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Protocol

from phalanx.kube.client import Kube
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]


class OwnerKind(Protocol):
    kind: str
    """The owner's kind, in the words the user's messages use."""

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        """The uid of the object's (a pod's, a PodGroup's) controller of this kind; None for another's."""
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
