"""Where DRA devices are matched against CEL selectors (the search itself is `phalanx.planner.allocator`).

Selectors are CEL (`phalanx.planner.cel`: compiled once per expression,
refused when too costly), and verdicts are remembered per (expression,
device), since a device's attributes only change with a new pool generation.
A selector that fails at run time on a device is an error, as it is for
upstream's allocator (which then aborts the pod), never a quiet "no match".

A selector within CEL's cost limit can still take tens of milliseconds per
device, and thousands of devices then take minutes: a plan's selector work is
bounded in time (`time_limit`, upstream's DRA filter timeout is 10 s), and a
plan that runs out names the slowest selector. The verdicts it reached stay
cached, so the next attempt goes on from there. What is bounded is the time
spent in selectors, not the plan's: placing 2,048 members on 5,000 nodes takes
longer than 10 s of its own, which a bound on the whole plan blamed on
selectors that took under a millisecond a device.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cachetools import LRUCache

from phalanx.planner import cel
from phalanx.planner.model import Claim, Device, DeviceClass, DeviceId, DeviceRequest

_DOMAIN = re.compile(r"""device\.(attributes|capacity)\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")

PROGRAMS = 1_024
"""Compiled selectors kept: far more distinct expressions than a cluster's classes and claims use at once."""
VERDICTS = 262_144
"""(expression, device) verdicts kept: a few selectors over every device of a 1,000-node cluster; the least used go first."""


class SelectorFailed(Exception):
    """A CEL selector that fails at run time on some device (a missing attribute, a bad quantity)."""


PLAN_TIME_LIMIT = 10.0
"""Seconds of selector evaluation one plan (or one preemption search) may spend: upstream's DRA filter timeout."""


class SelectorsTooSlow(Exception):
    """The selectors took longer than a plan may; `expression` is the one that cost the most time."""

    def __init__(self, limit: float, expression: str, seconds: float, devices: int) -> None:
        self.expression = expression
        super().__init__(
            f"device selectors took over {limit:g}s (the slowest, {expression!r}, {seconds / devices * 1000:.0f} ms per device "
            f"over {devices} devices); the devices judged so far are remembered for the next attempt"
        )


class DeviceMatcher:
    """Compile-once, evaluate-many CEL for DeviceClass and request selectors.

    Pure as far as callers can tell: it only caches answers that depend on
    nothing but the expression and the device.
    """

    def __init__(self) -> None:
        self._programs: LRUCache[str, Any] = LRUCache(maxsize=PROGRAMS)
        self._domains: LRUCache[str, tuple[tuple[str, str], ...]] = LRUCache(maxsize=PROGRAMS)
        self._verdicts: LRUCache[tuple[str, DeviceId, int], bool | str] = LRUCache(maxsize=VERDICTS)
        """True/False, or why evaluation failed."""
        self._ctx = cel.context()
        self._limit: float | None = None
        """Seconds of selector evaluation allowed under the current time limit (None: no limit)."""
        self._spent: dict[str, tuple[float, int]] = {}
        """Expression -> (seconds spent evaluating it, devices it was evaluated on) under the current time limit."""

    @contextlib.contextmanager
    def time_limit(self, seconds: float = PLAN_TIME_LIMIT) -> Iterator[None]:
        """Bound the selector work done inside; nested limits keep the outer one, so a preemption search that plans
        many times is bounded as a whole."""
        if self._limit is not None:
            yield
            return
        self._limit, self._spent = seconds, {}
        try:
            yield
        finally:
            self._limit = None

    def compile(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = cel.compile_selector(expression)
        return program

    def _named(self, expression: str) -> tuple[tuple[str, str], ...]:
        """The (map, domain) pairs the expression indexes literally, e.g. ("attributes", "example.com")."""
        found = self._domains.get(expression)
        if found is None:
            found = self._domains[expression] = tuple({(m[0], m[1] or m[2]) for m in _DOMAIN.findall(expression)})
        return found

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
            started = time.monotonic()
            try:
                self._ctx.update({"device": _cel_device(device, self._named(expression))})
                verdict = self.compile(expression).execute(self._ctx) is True
            except Exception as exc:
                verdict = f"selector fails on device {'/'.join(device.id)}: {exc}"
            self._verdicts[key] = verdict
            if self._limit is not None:
                seconds, devices = self._spent.get(expression, (0.0, 0))
                self._spent[expression] = (seconds + time.monotonic() - started, devices + 1)
                if sum(spent for spent, _ in self._spent.values()) > self._limit:
                    slowest = max(self._spent, key=lambda e: self._spent[e][0])
                    raise SelectorsTooSlow(self._limit, slowest, *self._spent[slowest])
        if isinstance(verdict, str):
            raise SelectorFailed(verdict)
        return verdict

    def eligible(self, device: Device, device_class: DeviceClass, request: DeviceRequest) -> bool:
        return all(self.matches(e, device) for e in device_class.selectors) and all(self.matches(e, device) for e in request.selectors)


def _cel_device(device: Device, named: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The device as CEL sees it; a domain the expression names and the device lacks is an empty map, as in
    Kubernetes, so `has(device.attributes["d"].x)` is false there rather than an error."""
    attributes: dict[str, dict[str, Any]] = {}
    for qualified, value in device.attributes.items():
        domain, _, name = qualified.rpartition("/")
        attributes.setdefault(domain or device.driver, {})[name] = value
    capacity: dict[str, dict[str, int]] = {}
    for qualified, value in device.capacity.items():
        domain, _, name = qualified.rpartition("/")
        capacity.setdefault(domain or device.driver, {})[name] = value
    maps = {"attributes": attributes, "capacity": capacity}
    for kind, domain in named:
        maps[kind].setdefault(domain, {})
    return {"driver": device.driver, "allowMultipleAllocations": device.allow_multiple, "attributes": attributes, "capacity": capacity}


def refusals(claims: Sequence[Claim], classes: Mapping[str, DeviceClass], matcher: DeviceMatcher) -> tuple[str, ...]:
    """Selectors the planner will not run, each named by its field as the user wrote it."""
    out = []
    for claim in claims:
        for i, request in enumerate(claim.requests):
            exact = [(f"spec.devices.requests[{i}].exactly", request)] if not request.subrequests else []
            subs = [(f"spec.devices.requests[{i}].firstAvailable[{k}]", s) for k, s in enumerate(request.subrequests)]
            for path, exact_request in exact + subs:
                for j, expression in enumerate(exact_request.selectors):
                    if (why := matcher.refused(expression)) is not None:
                        out.append(f"claim {claim.namespace}/{claim.name} {path}.selectors[{j}].cel.expression: {why}")
                device_class = classes.get(exact_request.device_class)
                for j, expression in enumerate(device_class.selectors if device_class else ()):
                    if (why := matcher.refused(expression)) is not None:
                        out.append(f"DeviceClass {device_class.name} spec.selectors[{j}].cel.expression: {why}")
    return tuple(dict.fromkeys(out))
