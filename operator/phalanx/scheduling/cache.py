"""The loop's cache of what it derives from the whole view: the planner's snapshot first, and the few values every
group's visit reads (pins, preemption policy, preempting groups, node names).

A snapshot is built once per state of the view, of this process's pins and of
the releases under way (`revision`), however many groups and members are
planned on it; each build applies only the node and pod writes since the one
before (`occupancy`: only the nodes they touched are made again), serves what
the slices publish again while none was written (`deviceinputs.Reuse`), and is what
`shortfalls` compares capacity on. A release decided is counted in the next snapshot at
once (`assumed`), so the next gang is planned as if it had gone.

Everything derived from a whole store is derived again only once that store was
written (`of_view`): one rule for every such value, kept here and nowhere else.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from phalanx.kube.informers import ClusterView, Key, key_of
from phalanx.planner.model import Claim, DeviceId, Snapshot, frozen_map
from phalanx.scheduling import accessors, assumed, deviceinputs, shortfall, snapshots
from phalanx.scheduling.headhold import HeadHold
from phalanx.scheduling.occupancy import Marks, Occupancy, Writes
from phalanx.scheduling.reserve import Releaser


class ClaimsTally:
    """The claims store as the planner counts it, kept as the watch writes it: each claim's model, the devices held
    whole (counted, so a device two claims hold stays held while either does) and the shares held.

    A listener of the claims informer (`Informer.listen`): a write only marks the claim, and `modelled` models the
    marked ones when a snapshot is built, on the event loop, so a claim that cannot be modelled fails that build as
    it always did, never the watch. Everything else is kept as it goes, so a snapshot after one claim write costs
    that claim's model and three copies made in C (a first version rebuilt the models from every claim's view on
    each snapshot, on the event loop: 7% of its samples in a 5,000-node burst). Before the tally, every build after
    any claim write looked up every claim again (3,000 claims: 29 ms a build at 5,000 nodes, 22 ms with it)."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._marked: set[Key] = set()
        self._models: dict[Key, Claim] = {}
        self._held: dict[Key, tuple[DeviceId, ...]] = {}
        self._shares: dict[Key, tuple[tuple[DeviceId, Mapping[str, Decimal]], ...]] = {}
        self._whole: dict[DeviceId, int] = {}
        self._modelled: deviceinputs.Modelled | None = None
        self.remodelled = 0
        """Claims modelled so far (a test reads it: only claims written are modelled again)."""

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        obj = after if after is not None else before
        if obj is None:
            return
        key = key_of(obj)
        if after is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = after
        self._marked.add(key)
        self._modelled = None

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        self._marked |= self._objects.keys() | store.keys()
        self._objects = dict(store)
        self._modelled = None

    def modelled(self) -> deviceinputs.Modelled:
        """Every claim as the planner counts it, the marked ones modelled again first."""
        if self._modelled is not None:
            return self._modelled
        for key in self._marked:
            self._models.pop(key, None)
            self._shares.pop(key, None)
            for device in self._held.pop(key, ()):
                left = self._whole[device] - 1
                if left:
                    self._whole[device] = left
                else:
                    del self._whole[device]
            obj = self._objects.get(key)
            if obj is None:
                continue
            model, whole, shares = deviceinputs.claim_view(obj)
            self.remodelled += 1
            self._models[key] = model
            if whole:
                self._held[key] = whole
                for device in whole:
                    self._whole[device] = self._whole.get(device, 0) + 1
            if shares:
                self._shares[key] = shares
        self._marked.clear()
        self._modelled = deviceinputs.Modelled(
            frozen_map(self._models), frozenset(self._whole), tuple(s for held in self._shares.values() for s in held)
        )
        return self._modelled


class Pins:
    """Pod uid -> node of every pin recorded in the reservations of one store (PodGroups, or CompositePodGroups),
    kept as its watch writes them: a listener of the informer (`Informer.listen`).

    Gathered from every group after any write to any group instead, the pins took 4.5% of the operator's samples in
    a 5,000-node burst, where every release writes its group several times. Should two groups' reservations name one
    pod (Phalanx's never do), it stays pinned while either names it, on the node of the one written last."""

    def __init__(self) -> None:
        self._of: dict[Key, dict[str, str]] = {}
        self._holders: dict[str, dict[Key, str]] = {}
        self.pins: dict[str, str] = {}

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        obj = after if after is not None else before
        if obj is None:
            return
        key = key_of(obj)
        now = accessors.recorded_pins(after) if after is not None else {}
        if now == self._of.get(key, {}):
            return
        for uid in self._of.pop(key, {}):
            holders = self._holders[uid]
            del holders[key]
            if holders:
                self.pins[uid] = next(reversed(holders.values()))
            else:
                del self._holders[uid], self.pins[uid]
        if now:
            self._of[key] = now
            for uid, node in now.items():
                self._holders.setdefault(uid, {})[key] = node
            self.pins.update(now)

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        self._of.clear()
        self._holders.clear()
        self.pins.clear()
        for obj in store.values():
            self.put(None, obj)


class ClusterCache:
    """The planner's snapshot and the values derived from whole stores of the view, each kept until what it was
    derived from is written."""

    def __init__(
        self,
        view: ClusterView,
        releaser: Releaser,
        releases: assumed.Releases,
        shortfalls: shortfall.Shortfalls,
        headhold: HeadHold,
        priority: Callable[[Mapping[str, Any]], int],
    ) -> None:
        self.view = view
        self.releaser = releaser
        self.releases = releases
        self.shortfalls = shortfalls
        self.headhold = headhold
        self.priority = priority
        self.pod_uids = view.pods.index("uid", lambda pod: [pod["metadata"]["uid"]])
        """Every pod by its uid (the loop's too: what it remembers of pods is kept only for those that exist)."""
        self._base: tuple[tuple[Any, ...], Snapshot] | None = None
        """(view revision and pins, snapshot): built once per state of the view, not once per group or member."""
        self._reuse = deviceinputs.Reuse()
        """What the slices published, served again while no slice was written."""
        self.occupancy = Occupancy()
        """What each node holds, kept as the watch writes it (`occupancy`)."""
        self._nodes = view.nodes.listen(f"occupancy {id(self)}", Marks)  # this cache's own: it takes what it applied
        self._pods = view.pods.listen(f"occupancy {id(self)}", Marks)
        """The nodes and pods written since a build last applied them to `occupancy`."""
        self._building = asyncio.Lock()
        """One build at a time: a second caller takes the first one's snapshot."""
        self._occupied = threading.Lock()
        """What builds keep (the occupancy, the slices' and the capacity's reuse) is touched by one thread at a time: a
        build whose caller was cancelled runs on in its thread, and the next waits for it."""
        self._capacity = shortfall.Kept()
        """What shortfall capacity derived from the snapshots before (free devices, each node's shape)."""
        self.claims = view.claims.listen("planner claims", ClaimsTally)
        """The claims as the planner counts them, kept as the watch writes them."""
        self._pins = (view.podgroups.listen("pins", Pins), view.composites.listen("pins", Pins))
        """The pins recorded in the groups' reservations, kept as the watches write them."""
        self._kept: dict[str, tuple[tuple[Any, ...], Any]] = {}
        """What `of_view` derived from whole stores: (their `written`, the value)."""
        self.built_cpu = 0.0
        """CPU seconds the snapshot builds took in their worker thread since the loop last reset it (its budget
        counts them)."""

    async def snapshot(self, for_group: Mapping[str, Any] | None = None) -> Snapshot:
        """This cycle's cluster; devices a preemption freed for another group, or held for the head of the line,
        count as held for any but that group.

        Put together in a worker thread, one build at a time: the nodes and pods written since the last build are
        applied to the `Occupancy` there, and only the nodes they touched are made again; the rest is taken from
        lists of the view's objects read here (the informers replace an object, never change it), so the event
        loop's webhooks, probes and watches never wait for a build."""
        async with self._building:
            key = self.revision()
            if self._base is None or self._base[0] != key:
                self._base = (key, await self._build())
        return self.headhold.elsewhere(snapshots.nominated_elsewhere(self._base[1], self.nominating(), for_group), for_group, self.priority)

    async def _build(self) -> Snapshot:
        view = self.view
        under_way = self.releases.assumed()
        podgroups, pins, policy = view.groups.items(), self.pins(), self.policy()
        planned = self.of_view("planned", (view.groups.written,), lambda: snapshots.any_planned(podgroups))
        every = view.pods.items() if planned else []
        members = [p for u in under_way.pods for p in self.pod_uids.get(u) if not accessors.started(p)]
        nodes, pods = self._nodes.take(), self._pods.take()
        sources = (view.slices.items(), view.claims.items() if every else [], view.classes.items(), view.taint_rules.items())
        written = (view.slices.written, view.taint_rules.written)
        claims, nominating = self.claims.modelled(), self.nominating()  # here: the watch writes to the tally on this loop
        built, capacity = await asyncio.to_thread(
            self._compose,
            nodes,
            pods,
            sources,
            written,
            podgroups if every else [],
            every,
            pins,
            policy,
            under_way,
            members,
            claims,
            nominating,
        )
        self._nodes.taken(nodes)  # applied: the next build starts from these
        self._pods.taken(pods)
        self.shortfalls.observe(capacity)
        return built

    def _compose(
        self,
        nodes: Writes,
        pods: Writes,
        sources: tuple[list[dict[str, Any]], ...],
        written: tuple[Any, ...],
        podgroups: list[dict[str, Any]],
        every: list[dict[str, Any]],
        pins: dict[str, str],
        policy: tuple[Any, ...],
        under_way: assumed.Assumption,
        members: list[dict[str, Any]],
        claims: deviceinputs.Modelled,
        nominating: list[dict[str, Any]],
    ) -> tuple[Snapshot, shortfall.Capacity | Callable[[], shortfall.Capacity]]:
        """In the worker thread. `podgroups`, `every` pod and the claims' objects: read only when some reservation
        planned devices for extended resources (else empty: `awaiting_kube_scheduler` has nothing to find);
        `members`: the gated members of the releases under way; `claims`: as the planner counts them (`ClaimsTally`);
        `nominating`: the groups preempting, whose victims' devices are not capacity a short group could use."""
        started = time.thread_time()
        slices, claim_objects, classes, rules = sources
        with self._occupied:
            held = self.occupancy.assemble(self.occupancy.apply(nodes, pods), pins, under_way.pods, members)
            built = snapshots.compose(
                held,
                slices,
                claims,
                classes,
                rules,
                awaiting=snapshots.awaiting_kube_scheduler(podgroups, every, claim_objects),
                assumed=under_way,
                reuse=self._reuse,
                written=written,
            )
            capacity: shortfall.Capacity | Callable[[], shortfall.Capacity] = functools.partial(
                shortfall.capacity, snapshots.nominated_elsewhere(built, nominating, None), policy, self._capacity
            )
            if self.shortfalls.short:
                capacity = capacity()  # here, off the event loop; else only if a group is found short on this snapshot
        self.built_cpu += time.thread_time() - started  # this worker's CPU counts against the cycle's budget too
        return built, capacity

    def revision(self) -> tuple[Any, ...]:
        """The state of the view (and of this process's pins and releases under way) a snapshot is built from."""
        return (self.view.revision, self.releaser.pinned.version, self.releases.version)

    def pins(self) -> dict[str, str]:
        """Pod uid -> node of every pin Phalanx made: recorded in a reservation, or written by this process just now."""
        return {**self._pins[0].pins, **self._pins[1].pins, **self.releaser.pinned}

    def policy(self) -> tuple[Any, ...]:
        """What preemption reads besides capacity (`shortfall.policy`)."""
        view = self.view
        return self.of_view(  # type: ignore[no-any-return]
            "policy",
            (view.priorities.written, view.budgets.written, view.groups.written),
            lambda: shortfall.policy(view.priorities.items(), view.budgets.items(), view.groups.items()),
        )

    def nominating(self) -> list[dict[str, Any]]:
        """The PodGroups with a nomination (their preemption under way), of every kind."""
        return self.of_view(  # type: ignore[no-any-return]
            "preempting",
            (self.view.groups.written,),
            lambda: [g for g in self.view.groups.items() if accessors.nomination(g) is not None],
        )

    def node_names(self) -> frozenset[str]:
        """Read by every released gang's visit: gathered again only once a node was written, not once per gang (0.6 ms
        at 5,000 nodes: with 1,000 gangs running, 0.6 s of every cycle)."""
        return self.of_view(  # type: ignore[no-any-return]
            "node names", (self.nodes_written(),), lambda: frozenset(n["metadata"]["name"] for n in self.view.nodes.items())
        )

    def nodes_written(self) -> tuple[int, int]:
        """The nodes' `written` without their heartbeats, which come from every node and change nothing kept: a node
        added, gone or changed moves it."""
        return self.view.nodes.written[:2]

    def of_view(self, what: str, written: tuple[Any, ...], derive: Callable[[], Any]) -> Any:
        """`derive()`, derived again only once the stores it reads (their `written`) were written."""
        kept = self._kept.get(what)
        if kept is None or kept[0] != written:
            kept = self._kept[what] = (written, derive())
        return kept[1]
