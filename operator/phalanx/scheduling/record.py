"""The reservation record a plan becomes, and the bodies a release writes from it.

`reservation_of` turns the planner's `Fits` into the intent record (`status.reservation`), which holds everything a
fresh write needs, so a restarted operator can finish or undo a release from the record alone; `allocation` is a
claim's `status.allocation` as kube-scheduler writes it, and `pinned_affinity` a member's pin to its node. Pure:
`reserve.Releaser` does the writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from phalanx.api import schema
from phalanx.planner import Fits, extended
from phalanx.planner.allocator import Result
from phalanx.planner.model import Toleration


def reservation_of(fits: Fits) -> schema.Reservation:
    return schema.Reservation(
        state="Reserving",
        placements=[schema.PodPlacement(name=m.name, uid=m.uid, node=n) for m, n in fits.placements],
        claims=[
            schema.ClaimReservation(
                name=c.name,
                uid=c.uid,
                node=c.node,
                results=[_result(r) for r in c.results],
                config=[dict(entry) for entry in c.config],
                pinned=c.pinned,
                node_selector=dict(c.node_selector) if c.node_selector is not None else None,
            )
            for c in fits.claims
        ],
        planned=[
            schema.PlannedDevices(
                pod=c.name.removesuffix(extended.SUFFIX),
                uid=c.uid.removesuffix(extended.SUFFIX),
                node=c.node,
                devices=["/".join(r.device_id) for r in c.results],
            )
            for c in fits.planned
        ]
        or None,
    )


def planned_devices(reservation: schema.Reservation) -> int:
    """Devices the plan counted for extended resources and left to kube-scheduler."""
    return sum(len(p.devices) for p in reservation.planned or ())


def _toleration(t: Toleration) -> dict[str, Any]:
    out: dict[str, Any] = {"operator": t.operator or "Equal"}
    for name, value in (("key", t.key), ("value", t.value), ("effect", t.effect)):
        if value:
            out[name] = value
    if t.seconds is not None:
        out["tolerationSeconds"] = t.seconds
    return out


def _result(r: Result) -> schema.DeviceResult:
    """Every field kube-scheduler's allocator sets on a result; absent ones stay absent."""
    return schema.DeviceResult(
        request=r.request,
        driver=r.driver,
        pool=r.pool,
        device=r.device,
        admin_access=True if r.admin_access else None,
        tolerations=[_toleration(t) for t in r.tolerations] or None,
        share_id=r.share_id,
        consumed_capacity={n: _quantity(v) for n, v in r.consumed.items()} or None,
        binding_conditions=list(r.binding_conditions) or None,
        binding_failure_conditions=list(r.binding_failure_conditions) or None,
    )


def _quantity(value: Decimal) -> str:
    """A canonical-enough quantity: whole numbers as integers, fractions in milli-units."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def takes_whole(r: schema.DeviceResult) -> bool:
    return not r.admin_access and not r.share_id


def allocation(claim: schema.ClaimReservation) -> dict[str, Any]:
    """status.allocation as kube-scheduler writes it: pinned to the node, or the devices' shared nodeSelector, or none."""
    devices: dict[str, Any] = {"results": [r.wire() for r in claim.results]}
    if claim.config:
        devices["config"] = [dict(c) for c in claim.config]
    out: dict[str, Any] = {"devices": devices}
    if claim.pinned:
        out["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [claim.node]}]}]}
    elif claim.node_selector is not None:
        out["nodeSelector"] = dict(claim.node_selector)
    return out


def pinned_affinity(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """Required node affinity that admits only `node`: set when empty, else appended to every term, as gated pods allow."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = dict(pod["spec"].get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        if pin not in (term.get("matchFields") or []):
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    affinity["nodeAffinity"] = node_affinity
    return affinity
