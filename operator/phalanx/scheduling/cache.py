"""The loop's cache of what it derives from the whole view: the planner's snapshot first, and the few values every
group's visit reads (pins, preemption policy, preempting groups, node names).

A snapshot is built once per state of the view, of this process's pins and of
the releases under way (`revision`), however many groups and members are
planned on it; each build reuses what the builds before it derived from every
object of an unchanged version (`inputs.Reuse`), and is what `shortfalls`
compares capacity on. A release decided is counted in the next snapshot at
once (`assumed`), so the next gang is planned as if it had gone.

Everything derived from a whole store is derived again only once that store was
written (`of_view`): one rule for every such value, kept here and nowhere else.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from phalanx.kube.informers import ClusterView, Key, key_of
from phalanx.planner.model import Claim, DeviceId, Snapshot, frozen_map
from phalanx.scheduling import accessors, assumed, inputs, shortfall
from phalanx.scheduling.headhold import HeadHold
from phalanx.scheduling.reserve import Releaser

PLACED = "placed"


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
        self._modelled: inputs.Modelled | None = None
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

    def modelled(self) -> inputs.Modelled:
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
            model, whole, shares = inputs.claim_view(obj)
            self.remodelled += 1
            self._models[key] = model
            if whole:
                self._held[key] = whole
                for device in whole:
                    self._whole[device] = self._whole.get(device, 0) + 1
            if shares:
                self._shares[key] = shares
        self._marked.clear()
        self._modelled = inputs.Modelled(
            frozen_map(self._models), frozenset(self._whole), tuple(s for held in self._shares.values() for s in held)
        )
        return self._modelled


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
        self._placed = view.pods.index(PLACED, lambda pod: [PLACED] if accessors.started(pod) else [])
        """The pods a snapshot counts (bound, or past the gate): a build walks these and the releases' under way, not
        the thousands of members waiting behind the gate."""
        self._base: tuple[tuple[Any, ...], Snapshot] | None = None
        """(view revision and pins, snapshot): built once per state of the view, not once per group or member."""
        self._reuse = inputs.Reuse()
        """What each build derived from each pod, node, slice and claim, reused by the next for the same version."""
        self._capacity = shortfall.Kept()
        """What shortfall capacity derived from the snapshots before (free devices, each node's shape)."""
        self.claims = view.claims.listen("planner claims", ClaimsTally)
        """The claims as the planner counts them, kept as the watch writes them."""
        self._kept: dict[str, tuple[tuple[Any, ...], Any]] = {}
        """What `of_view` derived from whole stores: (their `written`, the value)."""
        self.built_cpu = 0.0
        """CPU seconds the snapshot builds took in their worker thread since the loop last reset it (its budget
        counts them)."""

    async def snapshot(self, for_group: Mapping[str, Any] | None = None) -> Snapshot:
        """This cycle's cluster; devices a preemption freed for another group, or held for the head of the line,
        count as held for any but that group.

        Built in a worker thread, from lists of the view's objects taken here (the informers replace an object,
        never change it): even reusing every pod's view, a build walks every placed pod (0.4 CPU seconds at
        100,000), which the event loop's webhooks, probes and watches must not wait for.
        """
        view = self.view
        key = self.revision()
        if self._base is None or self._base[0] != key:
            under_way = self.releases.assumed()
            podgroups, pins, policy = view.podgroups.items(), self.pins(), self.policy()
            every = view.pods.items() if self.of_view("planned", (view.podgroups.written,), lambda: inputs.any_planned(podgroups)) else []
            sources = [i.items() for i in (view.nodes, view.slices, view.classes, view.taint_rules)]
            sources.insert(
                1, self._placed.get(PLACED) + [p for u in under_way.pods for p in self.pod_uids.get(u) if not accessors.started(p)]
            )
            sources.insert(3, view.claims.items() if every else [])  # the claims are modelled (`claims`); only read whole here
            built, capacity = await asyncio.to_thread(
                self._build, sources, podgroups if every else [], every, pins, policy, under_way, self.claims.modelled(), self.nominating()
            )
            self._base = (key, built)
            self.shortfalls.observe(capacity)
        return self.headhold.elsewhere(inputs.nominated_elsewhere(self._base[1], self.nominating(), for_group), for_group, self.priority)

    def _build(
        self,
        sources: list[list[dict[str, Any]]],
        podgroups: list[dict[str, Any]],
        every: list[dict[str, Any]],
        pins: dict[str, str],
        policy: tuple[Any, ...],
        under_way: assumed.Assumption,
        claims: inputs.Modelled,
        nominating: list[dict[str, Any]],
    ) -> tuple[Snapshot, shortfall.Capacity | Callable[[], shortfall.Capacity]]:
        """`podgroups`, `every` pod and the claims' objects: read only when some reservation planned devices for
        extended resources (else empty: `awaiting_kube_scheduler` has nothing to find); `claims`: as the planner
        counts them (`ClaimsTally`); `nominating`: the groups preempting, whose victims' devices are not capacity a
        short group could use."""
        started = time.thread_time()
        nodes, pods, slices, claim_objects, classes, rules = sources
        awaiting = inputs.awaiting_kube_scheduler(podgroups, every, claim_objects)
        built = inputs.build(
            nodes,
            pods,
            slices,
            claim_objects,
            classes,
            rules,
            pinned=pins,
            awaiting=awaiting,
            reuse=self._reuse,
            assumed=under_way,
            claims_modelled=claims,
        )
        capacity: shortfall.Capacity | Callable[[], shortfall.Capacity] = functools.partial(
            shortfall.capacity, inputs.nominated_elsewhere(built, nominating, None), policy, self._capacity
        )
        if self.shortfalls.short:
            capacity = capacity()  # here, off the event loop; else only if a group is found short on this snapshot
        self.built_cpu += time.thread_time() - started  # this worker's CPU counts against the cycle's budget too
        return built, capacity

    def revision(self) -> tuple[Any, ...]:
        """The state of the view (and of this process's pins and releases under way) a snapshot is built from."""
        return (self.view.revision, tuple(sorted(self.releaser.pinned.items())), self.releases.version)

    def pins(self) -> dict[str, str]:
        """Pod uid -> node of every pin Phalanx made: recorded in a reservation, or written by this process just now."""
        recorded = self.of_view("pins", (self.view.podgroups.written,), lambda: accessors.pins(self.view.podgroups.items()))
        return {**recorded, **self.releaser.pinned}

    def policy(self) -> tuple[Any, ...]:
        """What preemption reads besides capacity (`shortfall.policy`)."""
        view = self.view
        return self.of_view(  # type: ignore[no-any-return]
            "policy",
            (view.priorities.written, view.budgets.written, view.podgroups.written),
            lambda: shortfall.policy(view.priorities.items(), view.budgets.items(), view.podgroups.items()),
        )

    def nominating(self) -> list[dict[str, Any]]:
        """The PodGroups with a nomination (their preemption under way), of every kind."""
        return self.of_view(  # type: ignore[no-any-return]
            "preempting",
            (self.view.podgroups.written,),
            lambda: [g for g in self.view.podgroups.items() if accessors.nomination(g) is not None],
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
