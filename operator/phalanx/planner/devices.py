"""Where DRA devices are matched against CEL selectors (the search itself is `phalanx.planner.allocator`).

Selectors are CEL,
compiled once per expression; verdicts are remembered per (expression,
device), since a device's attributes only change with a new pool generation.
"""

from __future__ import annotations

from typing import Any

import cel
from cachetools import LRUCache

from phalanx.planner import quantity
from phalanx.planner.allocator import Result, allocate
from phalanx.planner.model import Device, DeviceClass, DeviceId, DeviceRequest

__all__ = ["DeviceMatcher", "Result", "allocate"]

PROGRAMS = 1_024
"""Compiled selectors kept: far more distinct expressions than a cluster's classes and claims use at once."""
VERDICTS = 262_144
"""(expression, device) verdicts kept: a few selectors over every device of a 1,000-node cluster; the least used go first."""


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
        self._programs: LRUCache[str, Any] = LRUCache(maxsize=PROGRAMS)
        self._verdicts: LRUCache[tuple[str, DeviceId, int], bool] = LRUCache(maxsize=VERDICTS)
        self._ctx = _cel_context()
        self.errors: LRUCache[str, str] = LRUCache(maxsize=PROGRAMS)

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
    return {"driver": device.driver, "allowMultipleAllocations": device.allow_multiple, "attributes": attributes, "capacity": capacity}
