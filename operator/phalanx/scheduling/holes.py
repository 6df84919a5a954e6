"""Where a device that was held twice is kept away from kube-scheduler until it is truly free.

kube-scheduler tracks allocated devices as a set fed by claim events
(`allocatedDevices` in its dynamicresources plugin): a claim that loses its
allocation removes its devices from the set even when another claim still
holds one of them. So every repair of a double allocation (one holder
yields, the other keeps the device) leaves a hole: the scheduler believes
the kept device free and hands it out again, and the next repair evicts the
newcomer, and so on. A `DeviceTaintRule` with effect NoSchedule (GA in 1.37,
`resource.k8s.io/v1`) on that device closes the hole: the scheduler no longer
allocates it, the holder keeps running. Once nobody holds the device, the
scheduler's set and the truth agree again and the rule is deleted.

The same rules keep the devices a gang preemption freed for its preemptor
from everyone else until the preemptor has reserved them (purpose
`nominated`, removed by the preemption, never swept).

On a server that does not serve DeviceTaintRules (1.34 without the gate), the
holes stay open; the repair still ends every double allocation it finds.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.kube.client import Conflict, Kube, NotFound, all_answered
from phalanx.planner.model import DeviceId
from phalanx.scheduling.inputs import consuming_ids

logger = logging.getLogger(__name__)

PATH = "/apis/resource.k8s.io/v1/devicetaintrules"


HELD = "held"
"""Purpose of a rule: a device kube-scheduler lost track of after a repaired double allocation."""
NOMINATED = "nominated"
"""Purpose of a rule: a device a preemption freed for one group, kept from everyone else until it is reserved."""


def rule_name(device: DeviceId, purpose: str = HELD) -> str:
    digest = hashlib.sha256("/".join(device).encode()).hexdigest()[:10]
    readable = "-".join(device[1:]).lower().replace(".", "-").replace("_", "-")[:40].strip("-")
    return f"phalanx-{purpose}-{readable}-{digest}"


def rule(device: DeviceId, purpose: str = HELD) -> dict[str, Any]:
    driver, pool, name = device
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(device, purpose),
            "labels": {keys.MANAGED_BY_LABEL: keys.MANAGER_NAME, keys.TAINT_PURPOSE_LABEL: purpose},
            "annotations": {keys.HELD_DEVICE_ANNOTATION: "/".join(device)},
        },
        "spec": {
            "deviceSelector": {"driver": driver, "pool": pool, "device": name},
            "taint": {"key": keys.HELD_TAINT, "value": purpose, "effect": "NoSchedule"},
        },
    }


def holders(claims: Iterable[Mapping[str, Any]]) -> dict[DeviceId, int]:
    out: dict[DeviceId, int] = {}
    for claim in claims:
        for device in set(consuming_ids(claim) or ()):
            out[device] = out.get(device, 0) + 1
    return out


class Holes:
    """The DeviceTaintRules Phalanx owns for one purpose, one per device it keeps from the scheduler."""

    def __init__(self, kube: Kube, purpose: str = HELD) -> None:
        self.kube = kube
        self.purpose = purpose
        self.covered: dict[DeviceId, str] = {}
        self.served: bool | None = None

    async def load(self) -> None:
        """Learn the rules a previous run left (they outlive a restart) and whether the server serves them at all."""
        try:
            body = await self.kube.request(
                "GET",
                PATH,
                query={"labelSelector": f"{keys.MANAGED_BY_LABEL}={keys.MANAGER_NAME},{keys.TAINT_PURPOSE_LABEL}={self.purpose}"},
            )
        except NotFound:
            self.served = False
            logger.warning("DeviceTaintRules are not served: a device kube-scheduler lost track of after a repair stays open to it")
            return
        self.served = True
        for item in body.get("items") or []:
            device = (item["metadata"].get("annotations") or {}).get(keys.HELD_DEVICE_ANNOTATION, "")
            parts = tuple(device.split("/", 2))
            if len(parts) == 3:
                self.covered[parts] = item["metadata"]["name"]

    async def cover(self, devices: Iterable[DeviceId], why: str) -> None:
        """Taint each device before the repair that would open its hole. The rules are made concurrently: a hold for a
        64-rank gang made one after another took 12 s on a busy 2-core machine, and the loop's cycle with it."""
        if self.served is None:
            await self.load()
        if not self.served:
            return

        async def one(device: DeviceId) -> None:
            with contextlib.suppress(Conflict):  # made by us before a restart
                await self.kube.create(PATH, rule(device, self.purpose))
            self.covered[device] = rule_name(device, self.purpose)
            logger.info("device %s kept from kube-scheduler until free: %s", "/".join(device), why)

        await all_answered(one(d) for d in dict.fromkeys(devices) if d not in self.covered)

    async def uncover(self, devices: Iterable[DeviceId]) -> None:
        """Give devices back to kube-scheduler."""
        devices = list(devices)
        if not devices:
            return
        if self.served is None:
            await self.load()
        if not self.served:
            return

        async def one(device: DeviceId) -> None:
            with contextlib.suppress(NotFound):
                await self.kube.delete(f"{PATH}/{rule_name(device, self.purpose)}")
            self.covered.pop(device, None)

        await all_answered(one(d) for d in dict.fromkeys(devices))

    async def sweep(self, claims: Iterable[Mapping[str, Any]]) -> None:
        """Delete the rule of every covered device nobody holds any more."""
        if not self.covered:
            return
        held = holders(claims)
        for device in [d for d in self.covered if not held.get(d)]:
            with contextlib.suppress(NotFound):
                await self.kube.delete(f"{PATH}/{self.covered[device]}")
            del self.covered[device]
            logger.info("device %s is free again: its taint rule is gone", "/".join(device))
