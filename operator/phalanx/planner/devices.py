"""Where DRA devices are matched: CEL selectors, allocation modes and matchAttribute constraints.

The structured-parameters allocator in miniature: a claim's requests are
satisfied from the devices a node can reach (its own slices, and pools whose
nodeSelector or allNodes covers it) that nobody holds. Selectors are CEL,
compiled once per expression; verdicts are remembered per (expression,
device), since a device's attributes only change with a new pool generation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cel

from phalanx.planner import quantity
from phalanx.planner.model import Claim, Device, DeviceClass, DeviceId, DeviceRequest


@dataclass(frozen=True)
class Result:
    """One entry of `status.allocation.devices.results`."""

    request: str
    driver: str
    pool: str
    device: str

    @property
    def device_id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


def _compare(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _cel_context() -> cel.Context:
    """Kubernetes' CEL quantity library over integers: capacities are exact integers here."""
    ctx = cel.Context()
    ctx.add_function("quantity", lambda text: quantity.amount("", text))
    ctx.add_function("compareTo", _compare)
    ctx.add_function("isGreaterThan", lambda a, b: a > b)
    ctx.add_function("isLessThan", lambda a, b: a < b)
    ctx.add_function("asInteger", lambda a: int(a))
    ctx.add_function("asApproximateFloat", lambda a: float(a))
    return ctx


class DeviceMatcher:
    """Compile-once, evaluate-many CEL for DeviceClass and request selectors.

    Pure as far as callers can tell: it only caches answers that depend on
    nothing but the expression and the device.
    """

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}
        self._verdicts: dict[tuple[str, DeviceId, int], bool] = {}
        self._ctx = _cel_context()
        self.errors: dict[str, str] = {}

    def compile(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = cel.compile(expression)
        return program

    def matches(self, expression: str, device: Device) -> bool:
        key = (expression, device.id, device.generation)
        verdict = self._verdicts.get(key)
        if verdict is None:
            try:
                self._ctx.update({"device": _cel_device(device)})
                verdict = self.compile(expression).execute(self._ctx) is True
            except Exception as exc:  # the scheduler, too, treats a failing selector as no match
                self.errors[expression] = str(exc)
                verdict = False
            self._verdicts[key] = verdict
        return verdict

    def eligible(self, device: Device, device_class: DeviceClass, request: DeviceRequest) -> bool:
        return all(self.matches(e, device) for e in device_class.selectors) and all(self.matches(e, device) for e in request.selectors)


def _cel_device(device: Device) -> dict[str, Any]:
    attributes: dict[str, dict[str, Any]] = {}
    for qualified, value in device.attributes.items():
        domain, _, name = qualified.rpartition("/")
        attributes.setdefault(domain or device.driver, {})[name] = value
    capacity: dict[str, dict[str, int]] = {}
    for qualified, value in device.capacity.items():
        domain, _, name = qualified.rpartition("/")
        capacity.setdefault(domain or device.driver, {})[name] = value
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity}


def allocate(
    claim: Claim,
    reachable: Sequence[Device],
    taken: frozenset[DeviceId] | set[DeviceId],
    classes: Mapping[str, DeviceClass],
    matcher: DeviceMatcher,
    memo: dict[tuple[Any, ...], list[Device]] | None = None,
    where: str = "",
) -> tuple[Result, ...] | None:
    """Devices for every request of `claim` from `reachable`, none of them in `taken`; None if impossible.

    `memo` keeps, per `where` (the node `reachable` belongs to) and request, the devices that match: a planner
    tries many claims alike on the same node, and the match does not depend on what is taken."""
    candidates: dict[str, list[Device]] = {}
    for request in claim.requests:
        device_class = classes.get(request.device_class)
        if device_class is None:
            return None
        key = (where, request.device_class, request.selectors)
        matching = memo.get(key) if memo is not None else None
        if matching is None:
            matching = [d for d in reachable if matcher.eligible(d, device_class, request)]
            if memo is not None:
                memo[key] = matching
        if request.mode == "All":
            if not matching or any(d.id in taken for d in matching):
                return None
            candidates[request.name] = matching
        else:
            candidates[request.name] = [d for d in matching if d.id not in taken]
    for restricted in _constrained(claim, candidates):
        results = _pick(claim.requests, restricted)
        if results is not None:
            return results
    return None


def _constrained(claim: Claim, candidates: dict[str, list[Device]]) -> Iterable[dict[str, list[Device]]]:
    """Each way of honouring the matchAttribute constraints: one shared value per constraint."""
    if not claim.constraints:
        yield candidates
        return
    choices = []
    for constraint in claim.constraints:
        names = constraint.requests or tuple(candidates)
        values = {d.attributes.get(constraint.attribute) for n in names for d in candidates.get(n, ())}
        values.discard(None)
        choices.append([(constraint, v) for v in sorted(values, key=repr)])
    for combination in itertools.product(*choices):
        restricted = dict(candidates)
        for constraint, value in combination:
            for name in constraint.requests or tuple(candidates):
                restricted[name] = [d for d in restricted[name] if d.attributes.get(constraint.attribute) == value]
        yield restricted


def _pick(requests: Sequence[DeviceRequest], candidates: dict[str, list[Device]]) -> tuple[Result, ...] | None:
    used: set[DeviceId] = set()
    results: list[Result] = []
    for request in requests:
        free = [d for d in candidates[request.name] if d.id not in used]
        want = len(free) if request.mode == "All" else request.count
        if want < 1 or len(free) < want:
            return None
        for device in free[:want]:
            used.add(device.id)
            results.append(Result(request.name, device.driver, device.pool, device.name))
    return tuple(results)
