"""Each group's members, looked up in an index the pods informer keeps, and what a cycle derives from them, kept.

A cycle meets every PodGroup. It used to find each group's members by walking
every pod (`accessors.pods_by_group`), then walk each group's pods again for
its live members, its waiting count, its gated members, the devices it holds
below quorum and its quiet fingerprint. With 1,000 gangs of 3 waiting that was
about 0.1 ms a gang a cycle, so one pod bound anywhere cost 240 ms of CPU on
100 nodes, 33 times what it cost with one gang waiting
(`./task bench -- --scale 100 --workloads waiting`).

Now the pods informer keeps its pods by (namespace, owner uid) as they are
written (`kube.informers.Index`), and each key's version moves with every
write to one of its pods. A value derived from a group and its members is
kept under (the group's resourceVersion, its members' version) and derived
again only when either moves, so a group nothing touched costs a few lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

from phalanx.kube.informers import Informer
from phalanx.scheduling.owner import OwnerKind

T = TypeVar("T")
JSON = dict[str, Any]


class Membership(Mapping[str, list[JSON]]):
    """PodGroup uid -> every pod of its owner (terminal and terminating ones too), for the groups of one `refresh`."""

    def __init__(self, pods: Informer, kind: OwnerKind) -> None:
        self._kind = kind
        self._by_owner = pods.index(
            f"members/{kind.kind}", lambda pod: [(pod["metadata"]["namespace"], uid) for uid in kind.member_uids(pod)]
        )
        self._keys: dict[str, tuple[str, str]] = {}
        """PodGroup uid -> (namespace, owner uid) of the groups refreshed last."""
        self._owners: dict[str, tuple[str | None, str | None]] = {}
        """PodGroup uid -> (resourceVersion, owner uid): read once per version of the group."""
        self._derived: dict[tuple[str, str], tuple[Hashable, Any]] = {}
        """(PodGroup uid, what) -> ((resourceVersion, members' version), value)."""

    def refresh(self, podgroups: list[JSON]) -> None:
        """The groups this cycle meets; what was kept for any other goes."""
        keys: dict[str, tuple[str, str]] = {}
        owners: dict[str, tuple[str | None, str | None]] = {}
        for group in podgroups:
            meta = group["metadata"]
            uid, version = meta["uid"], meta.get("resourceVersion")
            known = self._owners.get(uid)
            if known is None or known[0] != version or version is None:
                known = (version, self._kind.owner_uid(group))
            owners[uid] = known
            keys[uid] = (meta["namespace"], known[1] or "")
        gone = self._keys.keys() - keys.keys()
        self._keys, self._owners = keys, owners
        if gone:
            self._derived = {k: v for k, v in self._derived.items() if k[0] in keys}

    def owner_uid(self, pod_group: Mapping[str, Any]) -> str | None:
        """The group's owner of this loop's kind, as read at the last `refresh` (None: another kind's group)."""
        known = self._owners.get(pod_group["metadata"]["uid"])
        return known[1] if known is not None else self._kind.owner_uid(pod_group)

    def __getitem__(self, uid: str) -> list[JSON]:
        return self._by_owner.get(self._keys[uid])

    def __contains__(self, uid: object) -> bool:
        return uid in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def version(self, uid: str) -> int:
        """Moves with every write to one of the group's pods."""
        return self._by_owner.version(self._keys[uid])

    def derived(
        self, pod_group: Mapping[str, Any], what: str, derive: Callable[[Mapping[str, Any], list[JSON]], T], also: Hashable = None
    ) -> T:
        """`derive(pod_group, its pods)`, derived again only once the group or one of its pods was written since, or
        `also` (the version of whatever else `derive` reads: the claims store's) moved."""
        meta = pod_group["metadata"]
        uid = meta["uid"]
        if uid not in self._keys:  # a group not refreshed (created since): derived, not kept
            return derive(pod_group, self._by_owner.get((meta["namespace"], self._kind.owner_uid(pod_group) or "")))
        version = (meta.get("resourceVersion"), self.version(uid), also)
        kept = self._derived.get((uid, what))
        if kept is not None and kept[0] == version and version[0] is not None:
            return kept[1]  # type: ignore[no-any-return]
        value = derive(pod_group, self[uid])
        self._derived[(uid, what)] = (version, value)
        return value

    def kept(
        self, what: str, derive: Callable[[Mapping[str, Any], list[JSON]], T], also: Hashable = None
    ) -> Callable[[Mapping[str, Any], Any], T]:
        """`derive` as a function of (group, pods) that answers from `derived` (the pods it is given are not read)."""
        return lambda pod_group, _pods: self.derived(pod_group, what, derive, also)
