"""Where one claim's devices are chosen, the way kube-scheduler's structured allocator chooses them.

Phalanx writes allocations in kube-scheduler's place, so it must give the
devices the scheduler would give: the same first-fit depth-first search
(requests in order; for `firstAvailable`, subrequests in order until one
works; devices in pool order, pools with binding conditions last), and the
same rules for each candidate (1.37, the "incubating" allocator that the
default features select):

- a device in use is skipped, except by an `adminAccess` request, which
  consumes nothing: its result never makes the device busy for others;
- a device that consumes shared counters fits only while every counter of
  its pool still has room (a partition in use blocks the whole device);
- a device with `allowMultipleAllocations` is shared: each allocation
  consumes capacity (rounded by the capacity's requestPolicy) and gets a
  shareID, until the capacity is spent;
- NoSchedule/NoExecute device taints exclude a device unless the request
  tolerates them;
- matchAttribute / distinctAttribute constraints, and at most 32 results.

Where upstream's Allocate returns an error, failing the pod's attempt (a
selector failing on a device it evaluates, a device an All request must take
breaking a constraint, a pool being updated under an All request), the search
raises AllocationError; past MAX_STEPS candidates it raises SearchTooLarge.
tests/oracle compares all of this with upstream's own allocator.

The `Ledger` is the plan's mutable view of what is in use (the cluster's and
what the plan has allocated so far); every change it makes is undone by the
callable it returns, so the placement search can backtrack.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from phalanx.planner import catalog
from phalanx.planner.devices import DeviceMatcher, SelectorFailed
from phalanx.planner.model import (
    CapacityPolicy,
    Claim,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    MatchAttribute,
    Snapshot,
    Toleration,
    frozen_map,
)
from phalanx.planner.taints import tolerates

MAX_RESULTS = 32
"""AllocationResultsMaxSize: the most devices one claim's allocation may hold."""

MAX_STEPS = 20_000
"""Candidate devices one pod's search may try on one node: the planner's one bound on device search, a tenant limit.
kube-scheduler gives up a node after its DRA filter timeout (10 s), which counts that node as not fitting; a count of
steps stands in for that clock, so the planner stays pure and gives the same answer on a loaded machine. It is far
below what 10 s of Go allows: a claim of a few requests over a node of 8 devices settles in well under a thousand
steps, and a tenant's tangled claim must not make every node cost seconds of the planner's time."""

Undo = Callable[[], None]


class AllocationError(Exception):
    """Where upstream's Allocate returns an error, which aborts the pod's scheduling attempt rather than skip a node:
    a selector failing on a device it tries, or a device an All request must take that breaks a claim constraint."""


class SearchTooLarge(Exception):
    """The device search for one pod on one node tried MAX_STEPS candidates without an answer; says which claim field."""

    def __init__(self, claims: Sequence[Claim]) -> None:
        named = "; ".join(
            f"claim {c.namespace}/{c.name}: "
            + ("spec.devices.constraints (matchAttribute)" if c.constraints else "spec.devices.requests")
            + f" need more than {MAX_STEPS} candidate devices on some node"
            for c in claims
        )
        super().__init__(
            f"{named} (the planner gives up there, as kube-scheduler does at its DRA filter timeout); "
            "use fewer requests, devices or constraints per claim"
        )


_SHARE_NAMESPACE = uuid.UUID("8a0f6f53-4f0e-4d8f-9a57-2f3c1c5e6d10")


@dataclass(frozen=True)
class Result:
    """One entry of `status.allocation.devices.results`, with every field the scheduler would write."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    share_id: str | None = None
    consumed: Mapping[str, Decimal] = field(default_factory=frozen_map)
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


def tainted(device: Device, tolerations: Iterable[Toleration]) -> bool:
    """A NoSchedule or NoExecute taint the request does not tolerate; other effects (None) never exclude."""
    return any(t.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t) for t in device.taints)


def _consumed_by(requested: Decimal | None, cap: CapacityPolicy) -> Decimal:
    """What one allocation consumes of a capacity: the request rounded up by the policy, or the default, or all of it."""
    if requested is None:
        return cap.default if cap.default is not None else cap.value
    if cap.minimum is not None:
        if requested < cap.minimum:
            return cap.minimum
        if cap.step is None:
            return requested
        return cap.minimum + cap.step * math.ceil((requested - cap.minimum) / cap.step)
    if cap.valid_values:
        return next((v for v in cap.valid_values if requested <= v), requested)
    return requested


def _violates(consumed: Decimal, cap: CapacityPolicy) -> bool:
    if cap.default is not None and consumed == cap.default:
        return False
    if cap.minimum is not None:
        if cap.maximum is not None and consumed > cap.maximum:
            return True
        return cap.step is not None and (consumed - cap.minimum) % cap.step != 0
    return bool(cap.valid_values) and consumed not in cap.valid_values


def consumption(request: DeviceRequest, device: Device, in_use: Mapping[str, Decimal]) -> dict[str, Decimal] | None:
    """What allocating `device` for `request` consumes of each of its capacities, or None if it does not fit."""
    if any(name not in device.capacities for name in request.capacity):
        return None
    out: dict[str, Decimal] = {}
    for name, cap in device.capacities.items():
        consumed = _consumed_by(request.capacity.get(name), cap)
        if consumed < 0 or _violates(consumed, cap) or in_use.get(name, Decimal(0)) + consumed > cap.value:
            return None
        out[name] = consumed
    return out


class Ledger:
    """Devices in use, shared capacity consumed and counters consumed: the cluster's, plus the plan's so far."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.taken: set[DeviceId] = set(snapshot.held)
        self.shares: dict[DeviceId, dict[str, Decimal]] = {d: dict(c) for d, c in snapshot.shared.items()}
        self.sharers: dict[DeviceId, int] = dict.fromkeys(self.shares, 1)
        """Shares of each device in use, the cluster's counting as one."""
        self.counters = snapshot.counters
        self.used: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for device in catalog.of(snapshot.devices).consuming:
            if device.id in self.taken or device.id in self.shares:
                self._charge(device, 1)

    def _charge(self, device: Device, sign: int) -> None:
        used = self.used.setdefault((device.driver, device.pool), {})
        for use in device.consumes:
            for name, value in use.counters.items():
                key = (use.counter_set, name)
                used[key] = used.get(key, Decimal(0)) + sign * value

    def counters_fit(self, device: Device) -> bool:
        """With `device` charged, every counter of its pool still within what the pool publishes."""
        self._charge(device, 1)
        used = self.used.get((device.driver, device.pool), {})
        published = self.counters.get((device.driver, device.pool), {})
        fits = all(value >= used.get((counter_set, name), 0) for counter_set, c in published.items() for name, value in c.items())
        self._charge(device, -1)
        return fits

    def take(self, device: Device, consumed: Mapping[str, Decimal] | None, hold: bool = True) -> Undo:
        """Mark `device` used: a share adds its consumption (counters charged while any share exists); otherwise its
        counters are charged and, with `hold`, the device is taken whole (admin access holds nothing)."""
        if device.allow_multiple:
            sharers = self.sharers.get(device.id, 0)
            self.sharers[device.id] = sharers + 1
            share = self.shares.setdefault(device.id, {})
            for name, value in (consumed or {}).items():
                share[name] = share.get(name, Decimal(0)) + value
            if not sharers and device.consumes:
                self._charge(device, 1)

            def undo_share() -> None:
                for name, value in (consumed or {}).items():
                    share[name] -= value
                self.sharers[device.id] -= 1
                if not self.sharers[device.id]:
                    del self.sharers[device.id], self.shares[device.id]
                    if device.consumes:
                        self._charge(device, -1)

            return undo_share
        if device.consumes:
            self._charge(device, 1)
        if hold:
            self.taken.add(device.id)

        def undo_take() -> None:
            if hold:
                self.taken.discard(device.id)
            if device.consumes:
                self._charge(device, -1)

        return undo_take


def pool_order(devices: Iterable[Device]) -> list[Device]:
    """The allocator's order: pools by (driver, pool), those with binding conditions last; within a pool as published."""
    devices = list(devices)
    binding = {(d.driver, d.pool) for d in devices if d.binding_conditions}
    return sorted(devices, key=lambda d: ((d.driver, d.pool) in binding, d.driver, d.pool))


def _applies(constraint: MatchAttribute, base: str, full: str) -> bool:
    return not constraint.requests or base in constraint.requests or full in constraint.requests


@dataclass
class _Search:
    """One pod's unallocated claims, searched together as the scheduler does: claims in order, then requests."""

    claims: Sequence[Claim]
    reachable: Sequence[Device]
    ledger: Ledger
    classes: Mapping[str, DeviceClass]
    matcher: DeviceMatcher
    incomplete: bool = False
    """A pool being updated reaches this node: "all" devices is unknowable, as the scheduler says."""
    results: list[list[Result]] = field(default_factory=list)
    undos: list[Undo] = field(default_factory=list)
    marked: dict[DeviceId, set[int]] = field(default_factory=dict)
    """Devices this search marked in use, by the claims (their index) it marked them for (admin access included)."""
    values: list[list[list[Any]]] = field(default_factory=list)
    releases: list[Undo] = field(default_factory=list)
    every: dict[tuple[int, str], list[Device]] = field(default_factory=dict)
    """Per (claim, full request name) of an All request: every device it must take."""
    steps: int = 0

    def __post_init__(self) -> None:
        self.results = [[] for _ in self.claims]
        self.values = [[[] for _ in c.constraints] for c in self.claims]

    def prepare(self) -> None:
        """What "all" is for every All request and subrequest, before any search, as upstream works it out: so a
        selector failing there, or a pool being updated, is an AllocationError even if an earlier choice would do."""
        for ci, claim in enumerate(self.claims):
            for request in claim.requests:
                for exact, full in [(s, f"{request.name}/{s.name}") for s in request.subrequests] or [(request, request.name)]:
                    device_class = self.classes.get(exact.device_class)
                    if exact.mode != "All" or device_class is None:
                        continue
                    if self.incomplete:
                        raise AllocationError(
                            f"claim {claim.namespace}/{claim.name} spec.devices.requests[{full}]: asks for all devices, but a "
                            "resource pool this node reaches is being updated; kube-scheduler refuses the pod until it is complete"
                        )
                    self.every[(ci, full)] = [
                        d
                        for d in self.reachable
                        if self.eligible(ci, d, device_class, exact, full) and consumption(exact, d, {}) is not None  # static only
                    ]

    def request(self, ci: int, index: int) -> bool:
        if ci == len(self.claims):
            return True
        claim = self.claims[ci]
        if index == len(claim.requests):
            return self.request(ci + 1, 0)
        request = claim.requests[index]
        if request.subrequests:
            return any(self.exact(ci, index, sub, request.name, f"{request.name}/{sub.name}") for sub in request.subrequests)
        return self.exact(ci, index, request, request.name, request.name)

    def exact(self, ci: int, index: int, request: DeviceRequest, base: str, full: str) -> bool:
        device_class = self.classes.get(request.device_class)
        if device_class is None:
            return False
        if request.mode == "All":
            every = self.every[(ci, full)]
            if not every or len(every) > MAX_RESULTS - len(self.results[ci]):
                return False
            mark = len(self.undos)
            for device in every:
                if not self.add(ci, device, request, base, full, must=True):
                    self.rewind(mark)
                    return False
            if self.request(ci, index + 1):
                return True
            self.rewind(mark)
            return False
        return self.pick(ci, index, request, device_class, base, full, request.count, 0)

    def pick(
        self, ci: int, index: int, request: DeviceRequest, device_class: DeviceClass, base: str, full: str, left: int, start: int
    ) -> bool:
        if left == 0:
            return self.request(ci, index + 1)
        if left > MAX_RESULTS - len(self.results[ci]):
            return False
        for position in range(start, len(self.reachable)):
            device = self.reachable[position]
            if self.busy(ci, device, request) or not self.eligible(ci, device, device_class, request, full):
                continue
            mark = len(self.undos)
            if not self.add(ci, device, request, base, full):
                continue
            if self.pick(ci, index, request, device_class, base, full, left - 1, position + 1):
                return True
            self.rewind(mark)
        return False

    def eligible(self, ci: int, device: Device, device_class: DeviceClass, request: DeviceRequest, full: str) -> bool:
        """The selectors match; one failing on the device aborts the search (ledger unchanged), naming the request."""
        try:
            return self.matcher.eligible(device, device_class, request)
        except SelectorFailed as exc:
            self.rewind(0)
            claim = self.claims[ci]
            raise AllocationError(f"claim {claim.namespace}/{claim.name} spec.devices.requests[{full}]: {exc}") from None

    def busy(self, ci: int, device: Device, request: DeviceRequest) -> bool:
        """In use: by others, or by this search; admin access only minds its own claim, and not on a shared device."""
        if request.admin_access:
            return not device.allow_multiple and ci in self.marked.get(device.id, ())
        return device.id in self.ledger.taken or bool(self.marked.get(device.id))

    def add(self, ci: int, device: Device, request: DeviceRequest, base: str, full: str, must: bool = False) -> bool:
        """Take `device` for `request` if the in-use, counter, taint, constraint and capacity rules allow it. A device
        the request `must` take (allocationMode All) that breaks a constraint is an AllocationError, as upstream's."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            self.rewind(0)
            raise SearchTooLarge(self.claims)
        if self.busy(ci, device, request):
            return False
        shared_in_use = device.allow_multiple and device.id in self.ledger.shares
        charge = bool(device.consumes) and not shared_in_use
        if charge and not self.ledger.counters_fit(device):
            return False
        if tainted(device, request.tolerations):
            return False
        claim = self.claims[ci]
        values = self.values[ci]
        added = []
        for i, constraint in enumerate(claim.constraints):
            if not _applies(constraint, base, full):
                continue
            value = device.attributes.get(constraint.attribute)
            seen = values[i]
            if value is None or (seen and not constraint.distinct and value != seen[0]) or (constraint.distinct and value in seen):
                for j in reversed(added):
                    values[j].pop()
                if must:
                    self.rewind(0)
                    kind = "distinctAttribute" if constraint.distinct else "matchAttribute"
                    raise AllocationError(
                        f"claim {claim.namespace}/{claim.name} spec.devices.constraints[{i}] ({kind} {constraint.attribute}) "
                        f"cannot hold for device {'/'.join(device.id)}, which request {full} (allocationMode All) must take; "
                        "kube-scheduler refuses the pod: narrow that request's selectors or the constraint's requests"
                    )
                return False
            seen.append(value)
            added.append(i)
        consumed = consumption(request, device, self.ledger.shares.get(device.id, {}))
        if consumed is None:
            for j in reversed(added):
                values[j].pop()
            return False
        share = device.allow_multiple
        undo_ledger = self.ledger.take(device, consumed if share else None, hold=not request.admin_access)
        if request.admin_access:
            undo_ledger = self._for_this_search(undo_ledger)
        if not share:
            self.marked.setdefault(device.id, set()).add(ci)
        results = self.results[ci]
        results.append(
            Result(
                request=full,
                driver=device.driver,
                pool=device.pool,
                device=device.name,
                admin_access=request.admin_access,
                tolerations=request.tolerations,
                share_id=_share_id(claim, full, device, len(results)) if share else None,
                consumed=frozen_map(consumed if share else {}),
                binding_conditions=device.binding_conditions,
                binding_failure_conditions=device.binding_failure_conditions,
            )
        )

        def undo() -> None:
            results.pop()
            if not share:
                self.marked[device.id].discard(ci)
            undo_ledger()
            for j in reversed(added):
                values[j].pop()

        self.undos.append(undo)
        return True

    def _for_this_search(self, undo: Undo) -> Undo:
        """Admin access consumes capacity and counters while this search runs, as upstream's does, and nothing once
        allocated (kube-scheduler does not count an admin-access result as in use): `release` gives it back then."""
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                undo()

        self.releases.append(release)
        return release

    def rewind(self, mark: int) -> None:
        while len(self.undos) > mark:
            self.undos.pop()()


def _share_id(claim: Claim, request: str, device: Device, index: int) -> str:
    """Upstream draws a random UUID; a name-based one keeps the planner pure and a resumed write identical."""
    return str(uuid.uuid5(_SHARE_NAMESPACE, f"{claim.uid}/{request}/{index}/{'/'.join(device.id)}"))


def allocate_all(
    claims: Sequence[Claim],
    reachable: Sequence[Device],
    ledger: Ledger,
    classes: Mapping[str, DeviceClass],
    matcher: DeviceMatcher,
    incomplete: bool = False,
) -> tuple[tuple[tuple[Result, ...], ...], Undo] | None:
    """Devices for every request of every claim (one pod's unallocated claims, in the pod's order) from `reachable`
        (in pool order), charged to `ledger`; None if impossible. Returns the results per claim and the undo that gives
        back what they took from the ledger. Raises SearchTooLarge past MAX_STEPS candidates, SelectorFailed when a selector
    fails on a device it tries (the ledger unchanged either way)."""
    search = _Search(claims, reachable, ledger, classes, matcher, incomplete)
    search.prepare()
    if not search.request(0, 0):
        return None
    for release in search.releases:
        release()
    undos = list(search.undos)

    def undo() -> None:
        for step in reversed(undos):
            step()

    return tuple(tuple(r) for r in search.results), undo
