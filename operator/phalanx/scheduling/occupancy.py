"""What each node holds, kept as the watch writes it: its pods' requests and their views, so the snapshot after a
few writes derives again only the nodes those writes touched.

kube-scheduler keeps one cache that the watch updates node by node, each node with a generation, and copies into
each cycle's snapshot only the nodes whose generation moved. This is that for the planner's snapshot: the pods
and nodes informers each tell a `Marks` of every write; a build takes the writes not yet taken, applies them
(each pod's requests and view derived once per write, the node it is on marked), and makes a new `Node` only for
a node marked, or one what this process laid over the watch changed. Every other node is the same `Node` object
as in the snapshot before (a burst of small gangs at 5,000 nodes rebuilt every node's requests for every plan:
90 ms a snapshot, three times the plan's own cost).

Two layers make a node's occupancy:
- the watch's: every pod bound to it (`spec.nodeName`) and not terminal, kept one write at a time;
- this process's: a member released but not bound yet, on the node its pin names (`pinned`), and a member of a
  release under way, still gated, on the node its plan names (`assumed`). Few at any time, laid over the
  watch's at each build, and taken off at the next (the nodes they touched are made again).

A write is taken only once a build applied it (`Marks.taken`): a build that fails leaves it for the next, so no
node keeps what a write changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.kube.informers import Key, key_of
from phalanx.planner.model import Node, Pod, frozen_map
from phalanx.scheduling import inputs
from phalanx.scheduling.accessors import bound, gated, terminal

Requests = tuple[tuple[str, int], ...]


class Marks:
    """A listener of one informer (`Informer.listen`): every object written since a build last took it, as now
    written (None: deleted). Only marks on the event loop; `Occupancy` derives in the build."""

    def __init__(self) -> None:
        self._pending: dict[Key, dict[str, Any] | None] = {}
        self._created: set[Key] = set()
        """Keys created since a build took them: a node deleted and made again moved to the end of the store's order."""
        self._store: dict[Key, dict[str, Any]] = {}
        """The informer's store as the last list made it (the informer writes into it until the next list)."""
        self._relisted = 0
        """Moves when a list replaced the store: every object not in it is gone."""
        self._applied_relist = 0

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        obj = after if after is not None else before
        if obj is None:
            return
        key = key_of(obj)
        if before is None and after is not None:  # created (again, if deleted since): the store put it last
            self._pending.pop(key, None)
            self._created.add(key)
        self._pending[key] = after

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        self._store, self._pending = store, dict(store)
        self._created.clear()  # the list's order is the store's
        self._relisted += 1

    def take(self) -> Writes:
        """The writes not yet applied (a copy: the watch goes on marking while a build applies them); after a list,
        the whole store, in its order, which is the snapshot's."""
        if self._relisted != self._applied_relist:
            return Writes(dict(self._store), self._relisted)
        return Writes(dict(self._pending), created=frozenset(self._created))

    def taken(self, writes: Writes) -> None:
        """`writes` applied: each is no longer pending unless written again since."""
        for key in list(self._pending) if writes.relisted is not None else writes.objects:
            if key in self._pending and self._pending[key] is writes.objects.get(key):
                del self._pending[key]
                self._created.discard(key)
        if writes.relisted is not None:
            self._applied_relist = writes.relisted


@dataclass(frozen=True)
class Writes:
    objects: dict[Key, dict[str, Any] | None]
    """Key -> the object as written, None when deleted."""
    relisted: int | None = None
    """Set when a list replaced the store: `objects` is all of it, and what is not in it is gone."""
    created: frozenset[Key] = frozenset()
    """Keys among `objects` created since (maybe deleted before): in the store's order they come last, in the
    order of `objects`."""

    @staticmethod
    def of(objs: Iterable[dict[str, Any]]) -> Writes:
        """Every object, as a list shows them (a snapshot built from scratch)."""
        return Writes({key_of(o): o for o in objs}, 0)


@dataclass(frozen=True)
class Placed:
    """A pod counted on a node: its node, its requests and its view for the inter-pod rules."""

    node: str
    requests: Requests
    view: Pod


@dataclass
class Occupancy:
    """Every node and what it holds. Touched by one build at a time (`cache.ClusterCache` builds under a lock)."""

    bases: dict[str, Node] = field(default_factory=dict)
    """Node name -> its `Node` with nothing requested, in the informer's order (the snapshot's)."""
    placed: dict[Key, Placed] = field(default_factory=dict)
    """Every pod bound and not terminal."""
    released: dict[Key, dict[str, Any]] = field(default_factory=dict)
    """Pods past the gate, not bound yet, not terminal: on their pinned node if Phalanx pinned them."""
    totals: dict[str, dict[str, int]] = field(default_factory=dict)
    """Node name -> what its bound pods request, `pods` included."""
    made: dict[str, Node] = field(default_factory=dict)
    """Node name -> the `Node` the last build made (requests and all)."""
    laid: dict[Key, tuple[Mapping[str, Any], Placed]] = field(default_factory=dict)
    """What the last build laid over the watch's pods (released and assumed members), with the object it was
    derived from."""
    nodes: tuple[Node, ...] = ()
    """The last build's nodes, in order."""
    reordered: bool = False
    """A list replaced the nodes since the last build: its order is the snapshot's."""
    _requests: dict[Requests, Requests] = field(default_factory=dict)
    """Each distinct set of requests once: most pods ask alike, and 100,000 copies would cost 16 MiB."""
    _views: tuple[Any, ...] | None = None
    """The bound pods' views as the last build gave them, until a pod is written (made again per build, with
    3,000 of them, they were 4% of the operator's CPU in a 5,000-node burst, and the nodes' tuple 8%)."""

    def apply(self, nodes: Writes, pods: Writes) -> set[str]:
        """The informers' writes: the names of the nodes whose occupancy they changed."""
        touched: set[str] = set()
        if pods.relisted is not None:
            for key in [k for k in (*self.placed, *self.released) if k not in pods.objects]:
                self._pod(key, None, touched)
        for key, obj in pods.objects.items():
            self._pod(key, obj, touched)
        if nodes.relisted is not None:  # the list's order is the store's: the snapshot's nodes follow it
            before, self.bases, self.reordered = self.bases, {}, True
            touched.update(before)
        else:
            before = self.bases
        for key, obj in nodes.objects.items():
            name = key[1]
            known = before.get(name)
            if obj is None or key in nodes.created:  # gone, or made again: its place in the order is the store's last
                moved = self.bases.pop(name, None) is not None and obj is not None
                self.reordered |= moved  # made again alike, its Node is the same, but not its place
            if obj is not None:
                made = inputs.node(obj, {})
                self.bases[name] = known if known == made else made
            touched.add(name)
        if len(self._requests) > 4 * len(self.placed) + 1024:  # sets no pod asks for any more; the pods keep their own
            self._requests.clear()
        return touched

    def _pod(self, key: Key, obj: dict[str, Any] | None, touched: set[str]) -> None:
        self._views = None
        gone = self.placed.pop(key, None)
        if gone is not None:
            total = self.totals[gone.node]
            for name, value in gone.requests:
                total[name] -= value
            total["pods"] -= 1
            touched.add(gone.node)
        self.released.pop(key, None)
        if obj is None or terminal(obj):
            return
        if bound(obj):
            placed = self.place(obj, obj["spec"]["nodeName"])
            self.placed[key] = placed
            total = self.totals.setdefault(placed.node, {"pods": 0})
            for name, value in placed.requests:
                total[name] = total.get(name, 0) + value
            total["pods"] += 1
            touched.add(placed.node)
        elif not gated(obj):
            self.released[key] = obj

    def place(self, pod: Mapping[str, Any], node: str) -> Placed:
        requests = tuple(inputs.pod_requests(pod).items())
        return Placed(node, self._requests.setdefault(requests, requests), inputs.existing(pod, node))

    def assemble(
        self, touched: set[str], pinned: Mapping[str, str], assumed: Mapping[str, str], members: Iterable[Mapping[str, Any]]
    ) -> tuple[tuple[Node, ...], tuple[Pod, ...]]:
        """The snapshot's nodes and pods: the watch's, with released members on their pins and `members` of releases
        under way (gated, in `assumed`) on their planned nodes. Only the nodes `touched` and those the layer touched,
        now or last time, are made again."""
        laid: dict[Key, tuple[Mapping[str, Any], Placed]] = {}
        for key, pod in self.released.items():
            node = pinned.get(pod["metadata"]["uid"])
            if node is not None:
                laid[key] = self._laid(key, pod, node)
        for pod in members:
            key = key_of(pod)  # type: ignore[arg-type]
            node = assumed.get(pod["metadata"]["uid"])
            if node is not None and key not in self.placed and key not in laid and gated(pod) and not terminal(pod):
                laid[key] = self._laid(key, pod, node)
        if laid.keys() != self.laid.keys() or any(laid[k][1] is not self.laid[k][1] for k in laid):
            touched |= {p.node for _, p in laid.values()} | {p.node for _, p in self.laid.values()}
        layer: dict[str, list[Placed]] = {}
        for _, placed in laid.values():
            layer.setdefault(placed.node, []).append(placed)
        self.laid = laid
        changed, self.reordered = self.reordered, False
        for name in touched:
            base = self.bases.get(name)
            if base is None:
                if self.made.pop(name, None) is not None:
                    changed = True
                continue
            requested = dict(self.totals.get(name) or {})
            for placed in layer.get(name, ()):
                for resource, value in placed.requests:
                    requested[resource] = requested.get(resource, 0) + value
                requested["pods"] = requested.get("pods", 0) + 1
            requested = {k: v for k, v in requested.items() if v or k == "pods"} if requested.get("pods") else {}
            made = replace(base, requested=frozen_map(requested)) if requested else base
            if self.made.get(name) != made:
                self.made[name] = made
                changed = True
        if changed:
            self.nodes = tuple(map(self.made.__getitem__, self.bases))
        if self._views is None:
            self._views = tuple(p.view for p in self.placed.values())
        pods = self._views + tuple(p.view for _, p in laid.values())
        return self.nodes, pods

    def _laid(self, key: Key, pod: Mapping[str, Any], node: str) -> tuple[Mapping[str, Any], Placed]:
        """A released or assumed member on `node`: derived again only when it moved or was written."""
        last = self.laid.get(key)
        if last is not None and last[0] is pod and last[1].node == node:
            return last
        return pod, self.place(pod, node)
