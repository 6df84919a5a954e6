"""Where DRA devices are matched: selectors, allocation modes and matchAttribute constraints.

The structured-parameters allocator in miniature: a pod's claims are
satisfied together from the devices a node can reach (its own slices, and
pools whose nodeSelector or allNodes covers it) that nobody holds, searching
every combination in upstream's order, within a budget (COMBINATIONS) a
tenant's claim cannot exceed. Selectors are CEL (`phalanx.planner.cel`),
compiled once per expression; verdicts are remembered per (expression,
device), since a device's attributes only change with a new pool generation.
tests/oracle compares all this with Kubernetes' own allocator.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.planner import cel
from phalanx.planner.model import Claim, Device, DeviceClass, DeviceId, DeviceRequest

COMBINATIONS = 20_000
"""Device combinations one claim may try on one node before the planner gives up on it (upstream, too,
refuses a claim it cannot settle in time). Enough for every claim of a few requests on a node of 8 devices."""


class SelectorFailed(Exception):
    """A CEL selector that fails at run time on some device (a missing attribute, a bad quantity)."""


class TooComplex(Exception):
    """A claim whose device combinations exceed COMBINATIONS: the planner names it instead of searching on."""

    def __init__(self, claim: Claim) -> None:
        fields = "spec.devices.constraints (matchAttribute)" if claim.constraints else "spec.devices.requests"
        super().__init__(
            f"claim {claim.namespace}/{claim.name}: {fields} need more than {COMBINATIONS} device combinations to settle; "
            "use fewer requests or constraints per claim"
        )


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


class DeviceMatcher:
    """Compile-once, evaluate-many CEL for DeviceClass and request selectors.

    Pure as far as callers can tell: it only caches answers that depend on
    nothing but the expression and the device.
    """

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}
        self._verdicts: dict[tuple[str, DeviceId, int], bool | str] = {}
        """True/False, or why evaluation failed."""
        self._ctx = cel.context()

    def compile(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = cel.compile_selector(expression)
        return program

    def refused(self, expression: str) -> str | None:
        """Why the selector is refused before any device is tried (too costly, or not CEL), or None."""
        try:
            self.compile(expression)
        except ValueError as exc:
            return str(exc)
        return None

    def matches(self, expression: str, device: Device) -> bool:
        """Raises SelectorFailed when the selector fails on this device: upstream's allocator then refuses the pod
        (a CEL runtime error), and so does the planner, naming the device, rather than pass over the device."""
        key = (expression, device.id, device.generation)
        verdict = self._verdicts.get(key)
        if verdict is None:
            try:
                self._ctx.update({"device": _cel_device(device)})
                verdict = self.compile(expression).execute(self._ctx) is True
            except Exception as exc:
                verdict = f"selector fails on device {'/'.join(device.id)}: {exc}"
            self._verdicts[key] = verdict
        if isinstance(verdict, str):
            raise SelectorFailed(verdict)
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


def refusals(claims: Sequence[Claim], classes: Mapping[str, DeviceClass], matcher: DeviceMatcher) -> tuple[str, ...]:
    """Selectors the planner will not run, each named by its field as the user wrote it."""
    out = []
    for claim in claims:
        for i, request in enumerate(claim.requests):
            for j, expression in enumerate(request.selectors):
                if (why := matcher.refused(expression)) is not None:
                    out.append(
                        f"claim {claim.namespace}/{claim.name} spec.devices.requests[{i}].exactly.selectors[{j}].cel.expression: {why}"
                    )
            device_class = classes.get(request.device_class)
            for j, expression in enumerate(device_class.selectors if device_class else ()):
                if (why := matcher.refused(expression)) is not None:
                    out.append(f"DeviceClass {device_class.name} spec.selectors[{j}].cel.expression: {why}")
    return tuple(dict.fromkeys(out))


def allocate_all(
    claims: Sequence[Claim],
    reachable: Sequence[Device],
    taken: frozenset[DeviceId] | set[DeviceId],
    classes: Mapping[str, DeviceClass],
    matcher: DeviceMatcher,
) -> list[tuple[Result, ...]] | None:
    """Devices for every claim of one pod, together (as upstream allocates a pod's claims): one result tuple per claim,
    or None if no combination fits. Raises TooComplex past COMBINATIONS tries in all."""
    tries = [0]

    def search(i: int, held: frozenset[DeviceId]) -> list[tuple[Result, ...]] | None:
        if i == len(claims):
            return []
        for results in _solutions(claims[i], reachable, held, classes, matcher, tries):
            rest = search(i + 1, held | {r.device_id for r in results})
            if rest is not None:
                return [results, *rest]
        return None

    return search(0, frozenset(taken))


def _solutions(
    claim: Claim,
    reachable: Sequence[Device],
    taken: frozenset[DeviceId],
    classes: Mapping[str, DeviceClass],
    matcher: DeviceMatcher,
    tries: list[int],
) -> Iterator[tuple[Result, ...]]:
    """Every way to satisfy `claim`, in upstream's order: requests in order, combinations of free matching devices
    (backtracking); an All request takes every matching device (none may be held or taken by another request); a
    matchAttribute constraint holds when every device of its requests has the attribute, all with one value.
    `tries` counts combinations across calls; past COMBINATIONS it raises TooComplex."""
    candidates: list[list[Device]] = []
    for request in claim.requests:
        device_class = classes.get(request.device_class)
        if device_class is None:
            return
        try:
            matching = [d for d in reachable if matcher.eligible(d, device_class, request)]
        except SelectorFailed as exc:
            raise SelectorFailed(f"claim {claim.namespace}/{claim.name} spec.devices.requests[{request.name}]: {exc}") from None
        if request.mode == "All":
            if not matching or any(d.id in taken for d in matching):
                return
            candidates.append(matching)
        else:
            candidates.append([d for d in matching if d.id not in taken])
    constraints = [(c.attribute, set(c.requests or (r.name for r in claim.requests))) for c in claim.constraints]
    used: set[DeviceId] = set()
    values: list[Any] = [None] * len(constraints)
    chosen: list[tuple[Device, ...]] = []

    def search(i: int) -> Iterator[tuple[Result, ...]]:
        if i == len(claim.requests):
            yield tuple(
                Result(r.name, d.driver, d.pool, d.name) for r, devices in zip(claim.requests, chosen, strict=True) for d in devices
            )
            return
        request = claim.requests[i]
        free = [d for d in candidates[i] if d.id not in used]
        if request.mode == "All":
            options: Iterable[tuple[Device, ...]] = (tuple(free),) if len(free) == len(candidates[i]) else ()
        else:
            options = itertools.combinations(free, request.count)
        applying = [k for k, (_, names) in enumerate(constraints) if request.name in names]
        for devices in options:
            tries[0] += 1
            if tries[0] > COMBINATIONS:
                raise TooComplex(claim)
            saved = list(values)
            if all(_agree(devices, constraints[k][0], values, k) for k in applying):
                used.update(d.id for d in devices)
                chosen.append(devices)
                yield from search(i + 1)
                chosen.pop()
                used.difference_update(d.id for d in devices)
            values[:] = saved

    yield from search(0)


def _agree(devices: Sequence[Device], attribute: str, values: list[Any], k: int) -> bool:
    """The devices carry `attribute`, all with the constraint's value (set by the first device that has one)."""
    for device in devices:
        value = device.attributes.get(attribute)
        if value is None:
            return False
        if values[k] is None:
            values[k] = value
        elif values[k] != value:
            return False
    return True
