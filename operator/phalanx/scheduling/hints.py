"""Which groups a cycle must visit: each event marks the groups whose visit it could change, and a group whose last
visit found nothing to do is passed over until something marks it (kube-scheduler's QueueingHint).

A cycle meets every PodGroup in queue order, and with a thousand gangs waiting that no node can take, or a thousand
running with nothing to do, visiting each on every change anywhere cost hundreds of milliseconds a change. A visit to
such a group reads its PodGroup, the pods of its owner, the claims they name and its priority (a running gang's also
the nodes: a member on a node gone is lost). So the informers tell this module of every write as it lands, and each
write marks what it touches:

- a PodGroup or CompositePodGroup written marks itself (a PodGroup that is a composite's role marks every group);
- a pod written marks the groups of its owner (`OwnerKind.member_uids`, the key the members index uses);
- a claim written marks the groups whose pods name it (as their last visit read them);
- a PriorityClass written, or any of these stores listed again after a gap, marks every group (a hint unsure of
  what it touches marks everything, as upstream treats a hint's error as Queue);
- a node added, gone or changed (not a heartbeat) marks every running gang.

Marks are numbered, never consumed: a visit takes the number current when the cycle read its objects (`seq`), and
the group may be passed over later only while no mark of it is newer (`unmarked`). A write that lands while the visit
runs, or a cycle that stops early (a lost Lease), never loses a mark. Capacity freed is the shortfall memo's
(`shortfall.Shortfalls.still_short`); deadlines, back-offs and counts due are the group's memory (`memory`). These
three are the only reasons a group is met again: there is no per-group fingerprint to compare.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from phalanx.kube.informers import ClusterView, Key, key_of, unread_change
from phalanx.scheduling import composites

JSON = dict[str, Any]
NAME = "hints"
"""The listeners' name on each informer."""


class _Told:
    """A listener that hands each write, and each relist, to the hints."""

    def __init__(self, put: Callable[[JSON | None, JSON | None], None], rebuild: Callable[[], None]) -> None:
        self.put = put
        self._rebuild = rebuild

    def rebuild(self, store: dict[Key, JSON]) -> None:
        self._rebuild()


class Hints:
    """The marks of every group since the loop began, by number."""

    def __init__(self, view: ClusterView, member_keys: Callable[[JSON], Iterable[Hashable]]) -> None:
        self.seq = 1
        """The number of the last mark: a visit that read the cluster now is newer than every mark so far."""
        self._member_keys = member_keys
        self._groups: dict[str, int] = {}
        """PodGroup uid -> its last mark."""
        self._members: dict[Hashable, int] = {}
        """Member key (namespace, owner uid) -> the last mark of a pod under it."""
        self._everything = 1
        """The last mark of every group (a PriorityClass written, a store listed again)."""
        self._nodes = 1
        """The last mark of every running gang (a node added, gone or changed)."""
        self._named: dict[Key, set[str]] = {}
        """Claim (namespace, name) -> the PodGroups whose pods name it, as their last visit read them."""
        self._names: dict[str, tuple[Key, ...]] = {}
        """PodGroup uid -> the claims its pods named at its last visit."""
        view.podgroups.listen(NAME, lambda: _Told(self._group, self._all))
        view.composites.listen(NAME, lambda: _Told(self._group, self._all))
        view.pods.listen(NAME, lambda: _Told(self._pod, self._all))
        view.claims.listen(NAME, lambda: _Told(self._claim, self._all))
        view.priorities.listen(NAME, lambda: _Told(lambda before, after: self._all(), self._all))
        view.nodes.listen(NAME, lambda: _Told(self._node, self._node_relisted))

    def unmarked(self, uid: str, members: Hashable, since: int) -> bool:
        """True when no write since mark `since` touched the group (its PodGroup, its pods, the claims they name, a
        PriorityClass): what a visit then read is what a visit now would read."""
        return self._everything <= since and self._groups.get(uid, 0) <= since and self._members.get(members, 0) <= since

    def nodes_unmarked(self, since: int) -> bool:
        """True when no node was added, went or changed since mark `since`."""
        return self._nodes <= since

    def reads(self, uid: str, claims: Iterable[Key]) -> None:
        """The claims a visit of the group reads (those its pods name): a write to one marks it from now on."""
        claims = tuple(claims)
        before = self._names.get(uid, ())
        if before == claims:
            return
        for key in before:
            self._unname(key, uid)
        for key in claims:
            self._named.setdefault(key, set()).add(uid)
        self._names[uid] = claims

    def keep_only(self, live: set[str], members: Iterable[Hashable]) -> None:
        """Only the marks of live groups and of their members' keys stay."""
        self._groups = {uid: seq for uid, seq in self._groups.items() if uid in live}
        kept = set(members)
        self._members = {key: seq for key, seq in self._members.items() if key in kept}
        for uid in [u for u in self._names if u not in live]:
            for key in self._names.pop(uid):
                self._unname(key, uid)

    def _unname(self, key: Key, uid: str) -> None:
        named = self._named.get(key)
        if named is not None:
            named.discard(uid)
            if not named:
                del self._named[key]

    def _mark(self) -> int:
        self.seq += 1
        return self.seq

    def _group(self, before: JSON | None, after: JSON | None) -> None:
        obj = after if after is not None else before
        if obj is not None and composites.parent(obj) is not None:
            self._all()  # a role of a composite: which group it is part of is the composite's, looked up nowhere here
        elif obj is not None:
            self._groups[obj["metadata"]["uid"]] = self._mark()

    def _pod(self, before: JSON | None, after: JSON | None) -> None:
        keys = {*(self._member_keys(before) if before is not None else ()), *(self._member_keys(after) if after is not None else ())}
        if keys:
            seq = self._mark()
            for key in keys:
                self._members[key] = seq

    def _claim(self, before: JSON | None, after: JSON | None) -> None:
        obj = after if after is not None else before
        if obj is None:
            return
        named = self._named.get(key_of(obj))
        if named:
            seq = self._mark()
            for uid in named:
                self._groups[uid] = seq

    def _node(self, before: JSON | None, after: JSON | None) -> None:
        if before is None or after is None or not unread_change(before, after):
            self._nodes = self._mark()

    def _all(self) -> None:
        self._everything = self._nodes = self._mark()

    def _node_relisted(self) -> None:
        self._nodes = self._mark()


def member_keys(kind: Any) -> Callable[[Mapping[str, Any]], list[tuple[str, str]]]:
    """The members index's keys of a pod (`membership.Membership`): (its namespace, each owner uid of `kind`)."""
    return lambda pod: [(pod["metadata"]["namespace"], uid) for uid in kind.member_uids(pod)]
