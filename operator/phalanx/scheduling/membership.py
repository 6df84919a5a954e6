"""Each group's members, looked up in an index the pods informer keeps, and what a cycle derives from them, kept.

A cycle meets every PodGroup. It used to find each group's members by walking
every pod (`accessors.pods_by_group`), then walk each group's pods again for
its live members, its waiting count, its gated members, the devices it holds
below quorum. With 1,000 gangs of 3 waiting that was
about 0.1 ms a gang a cycle, so one pod bound anywhere cost 240 ms of CPU on
100 nodes, 33 times what it cost with one gang waiting
(`./task bench -- --scale 100 --workloads waiting`).

Now the pods informer keeps its pods by (namespace, owner uid) as they are
written (`kube.informers.Index`), and each key's version moves with every
write to one of its pods. What a cycle reads of a group and its members
(`Facts`), and of the claims they name (`Reads`), is kept under (the group's
resourceVersion, its members' version, the claims store's) and derived again
only when one moves, so a group nothing touched costs two lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from phalanx.api import keys
from phalanx.kube.informers import Informer
from phalanx.owners.seam import OwnerKind
from phalanx.scheduling import accessors, hints, pointers, quorum, waits

T = TypeVar("T")
JSON = dict[str, Any]


ClaimLookup = Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Facts:
    """What a cycle reads of one group and its pods."""

    live: list[JSON]
    """Its live members, by name: those the cycle reconciles."""
    gated: list[JSON]
    """A gang's live members behind the gate (`pointers.gated_members`): those a pointer is due on."""
    waits_in: str | None
    """The priority class it waits in (`waits.priority_class`); None when it does not wait."""
    claims: tuple[tuple[str, str], ...]
    """Every claim its pods name, (namespace, name), in order: what its visit reads of the claims (`hints.reads`)."""


def facts(pod_group: Mapping[str, Any], pods: list[JSON]) -> Facts:
    return Facts(
        live=sorted(filter(accessors.live, pods), key=lambda p: p["metadata"]["name"]),
        gated=pointers.gated_members(pod_group, pods),  # type: ignore[arg-type]
        waits_in=waits.priority_class(pod_group, pods),  # type: ignore[arg-type]
        claims=tuple((p["metadata"]["namespace"], name) for p in pods for name in accessors.claim_names(p) or ()),
    )


class Membership(Mapping[str, list[JSON]]):
    """PodGroup uid -> every pod of its owner (terminal and terminating ones too), for the groups of one `refresh`."""

    def __init__(self, pods: Informer, kind: OwnerKind) -> None:
        self._kind = kind
        self._by_owner = pods.index(f"members/{kind.kind}", hints.member_keys(kind))
        self._keys: dict[str, tuple[str, str]] = {}
        """PodGroup uid -> (namespace, owner uid) of the groups refreshed last."""
        self._owners: dict[str, tuple[str | None, str | None]] = {}
        """PodGroup uid -> (resourceVersion, owner uid): read once per version of the group."""
        self._stamps: dict[str, int] = {}
        """PodGroup uid -> its members' version at the last `refresh`: what is derived in a cycle is kept under the
        version the cycle began with (a pod written since is met by the next cycle, as a cycle meets a snapshot)."""
        self._derived: dict[str, dict[str, tuple[Hashable, Any]]] = {}
        """what -> PodGroup uid -> ((resourceVersion, members' version, also), value)."""

    def refresh(self, podgroups: list[JSON]) -> None:
        """The groups this cycle meets; what was kept for any other goes."""
        keys: dict[str, tuple[str, str]] = {}
        owners: dict[str, tuple[str | None, str | None]] = {}
        stamps: dict[str, int] = {}
        for group in podgroups:
            meta = group["metadata"]
            uid, version = meta["uid"], meta.get("resourceVersion")
            known = self._owners.get(uid)
            if known is None or known[0] != version or version is None:
                known = (version, self._kind.owner_uid(group))
            owners[uid] = known
            key = keys[uid] = (meta["namespace"], known[1] or "")
            stamps[uid] = self._by_owner.version(key)
        gone = self._keys.keys() - keys.keys()
        self._keys, self._owners, self._stamps = keys, owners, stamps
        if gone:
            self._derived = {what: {u: v for u, v in kept.items() if u in keys} for what, kept in self._derived.items()}

    def owner_uid(self, pod_group: Mapping[str, Any]) -> str | None:
        """The group's owner of this loop's kind, as read at the last `refresh` (None: another kind's group)."""
        known = self._owners.get(pod_group["metadata"]["uid"])
        return known[1] if known is not None else self._kind.owner_uid(pod_group)

    def key(self, uid: str) -> tuple[str, str]:
        """The group's members' key in the index, (namespace, owner uid), as of the last `refresh`."""
        return self._keys[uid]

    def keys_in_use(self) -> Iterable[tuple[str, str]]:
        return self._keys.values()

    def __getitem__(self, uid: str) -> list[JSON]:
        return self._by_owner.get(self._keys[uid])

    def __contains__(self, uid: object) -> bool:
        return uid in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def writes(self) -> int:
        """Moves with every write to a pod of some group: equal, every group has the pods it had."""
        return self._by_owner.writes

    def version(self, uid: str) -> int:
        """Moves with every write to one of the group's pods (as of the last `refresh`)."""
        return self._stamps[uid]

    def derived(
        self, pod_group: Mapping[str, Any], what: str, derive: Callable[[Mapping[str, Any], list[JSON]], T], also: Hashable = None
    ) -> T:
        """`derive(pod_group, its pods)`, derived again only once the group or one of its pods was written since, or
        `also` (the version of whatever else `derive` reads: the claims store's) moved."""
        meta = pod_group["metadata"]
        uid = meta["uid"]
        stamp = self._stamps.get(uid)
        if stamp is None:  # a group not refreshed (created since): derived, not kept
            return derive(pod_group, self._by_owner.get((meta["namespace"], self._kind.owner_uid(pod_group) or "")))
        version = (meta.get("resourceVersion"), stamp, also, pod_group.get(keys.ROLES))  # a composite's roles move alone
        kept_for = self._derived.setdefault(what, {})
        kept = kept_for.get(uid)
        if kept is not None and kept[0] == version and version[0] is not None:
            return kept[1]  # type: ignore[no-any-return]
        value = derive(pod_group, self[uid])
        kept_for[uid] = (version, value)
        return value

    def facts(self, pod_group: Mapping[str, Any]) -> Facts:
        return self.derived(pod_group, "facts", facts)

    def held(self, pod_group: Mapping[str, Any], claim: ClaimLookup, claims_written: Hashable) -> int:
        """The devices the group holds below quorum (`quorum.held_devices`); `claims_written`: the claims store's
        version (`Informer.written`)."""
        return self.derived(pod_group, "held", lambda g, pods: quorum.held_devices(g, pods, claim), also=claims_written)
