"""The planner's snapshot put together: what each node holds (`occupancy`), what the slices publish, every device
a claim holds, the releases under way counted as done (`assumed`).

The translation follows what kube-scheduler counts: requests of every non-terminal pod bound to a node (plus those
Phalanx pinned, as its reservations record, and released but the scheduler has not bound yet), only the newest
complete generation of a ResourceSlice pool, and every device some claim holds. The same pods are what pod
affinity, topology spreading and host ports are judged against.

`build` makes one from lists of objects, from scratch; the loop's cache (`cache.ClusterCache`) keeps an
`Occupancy` as the watch writes and puts each snapshot together from it (`compose`), by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from phalanx.api import keys
from phalanx.planner.model import DeviceId, Node, Pod, Snapshot, frozen_map
from phalanx.scheduling.accessors import allocated_ids, nominated_devices, nomination, pins, terminal
from phalanx.scheduling.assumed import NOTHING, Assumption
from phalanx.scheduling.deviceinputs import Modelled, Reuse, claim_view, device_class, extended_resources, modelled, published
from phalanx.scheduling.occupancy import Occupancy, Writes


def any_planned(podgroups: Iterable[Mapping[str, Any]]) -> bool:
    """Some reservation planned devices for a member's extended resources (`awaiting_kube_scheduler` has work)."""
    return any(((g.get("status") or {}).get("reservation") or {}).get("planned") for g in podgroups)


def awaiting_kube_scheduler(
    podgroups: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]
) -> frozenset[DeviceId]:
    """Devices a reservation planned for a member's extended resources while kube-scheduler has not yet allocated
    that member's own claim: held for Phalanx's next plans, so it gives them to no other gang in that window.
    Only Phalanx heeds this; a pod kube-scheduler places alone may still take them (the bind deadline covers it)."""
    planned = [p for g in podgroups for p in (((g.get("status") or {}).get("reservation") or {}).get("planned") or ())]
    if not planned:
        return frozenset()  # no reservation planned any: the pods and claims need no walk
    live = {p["metadata"]["uid"] for p in pods if not terminal(p) and not p["metadata"].get("deletionTimestamp")}
    served = {
        ref["uid"]
        for c in claims
        if (c["metadata"].get("annotations") or {}).get(keys.EXTENDED_RESOURCE_CLAIM) == "true" and allocated_ids(c) is not None
        for ref in c["metadata"].get("ownerReferences") or []
        if ref.get("controller")
    }
    return frozenset(
        tuple(d.split("/", 2))  # type: ignore[misc]
        for entry in planned
        if entry.get("uid") in live and entry["uid"] not in served
        for d in entry.get("devices") or ()
    )


def build(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    taint_rules: Iterable[Mapping[str, Any]] = (),
    pinned: Mapping[str, str] | None = None,
    awaiting: frozenset[DeviceId] = frozenset(),
    assumed: Assumption = NOTHING,
    reuse: Reuse | None = None,
    claims_modelled: Modelled | None = None,
) -> Snapshot:
    """A snapshot of these objects, from scratch (but for what the slices publish, served from `reuse` while none
    changed, and the claims, where `claims_modelled` has them as the planner counts them).

    `pinned`: pod uid -> node of every pin Phalanx made (a released member not bound yet counts there).
    `awaiting`: devices planned for extended resources that kube-scheduler has yet to allocate, counted as held.
    `assumed`: the releases under way (`scheduling/assumed.py`), counted as done: a member still gated on its
    planned node, a claim the watch does not show allocated yet as holding what its release writes."""
    pods, claims = list(pods), list(claims)
    occupancy = Occupancy()
    touched = occupancy.apply(Writes.of(nodes), Writes.of(pods))  # type: ignore[arg-type]
    held = occupancy.assemble(touched, pinned or {}, assumed.pods, pods)
    counted = modelled(claim_view(c) for c in claims) if claims_modelled is None else claims_modelled
    return compose(held, slices, counted, classes, taint_rules, awaiting=awaiting, assumed=assumed, reuse=reuse)


def compose(
    held: tuple[tuple[Node, ...], tuple[Pod, ...]],
    slices: Iterable[Mapping[str, Any]],
    claims: Modelled,
    classes: Iterable[Mapping[str, Any]],
    taint_rules: Iterable[Mapping[str, Any]] = (),
    *,
    awaiting: frozenset[DeviceId] = frozenset(),
    assumed: Assumption = NOTHING,
    reuse: Reuse | None = None,
    written: Any = None,
) -> Snapshot:
    """The snapshot of the nodes and pods `held` (`Occupancy.assemble`), the devices the slices publish and the
    `claims` as the planner counts them. `reuse`, `written`: what the slices published before, and the stores'
    `written` it is served by (`deviceinputs.published`)."""
    classes = list(classes)
    offered = published(slices, taint_rules, reuse, written)
    whole = set(claims.whole)
    held_shares = list(claims.shares)
    for key, use in assumed.claims.items():
        written_claim = claims.models.get(key)
        if written_claim is None or written_claim.uid != use.uid or written_claim.allocated is None:
            whole.update(use.whole)
            held_shares.extend(use.shares)
    shared: dict[DeviceId, dict[str, Decimal]] = {}
    for device, consumed in held_shares:
        total = shared.setdefault(device, {})
        for name, value in consumed.items():
            total[name] = total.get(name, Decimal(0)) + value
    nodes, placed = held
    return Snapshot(
        nodes=nodes,
        devices=offered.devices,
        classes=frozen_map({c["metadata"]["name"]: device_class(c) for c in classes}),
        claims=claims.models,
        held=frozenset(whole) | awaiting | assumed.planned,
        pods=placed,
        shared=frozen_map({d: frozen_map(c) for d, c in shared.items()}),
        counters=offered.counters,
        extended=frozen_map(extended_resources(classes)),
        incomplete=offered.incomplete,
    )


def snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    podgroups: Iterable[Mapping[str, Any]],
    for_group: Mapping[str, Any] | None = None,
    taint_rules: Iterable[Mapping[str, Any]] = (),
    pinned: Mapping[str, str] | None = None,
) -> Snapshot:
    """The cluster as `for_group` is planned on: devices a preemption freed for another group count as held.

    `pinned` is every pin Phalanx made (default: those the PodGroups' reservations record)."""
    podgroups, pods, claims = list(podgroups), list(pods), list(claims)
    awaiting = awaiting_kube_scheduler(podgroups, pods, claims)
    built = build(nodes, pods, slices, claims, classes, taint_rules, pins(podgroups) if pinned is None else pinned, awaiting)
    return nominated_elsewhere(built, podgroups, for_group)


def nominated_elsewhere(built: Snapshot, podgroups: Iterable[Mapping[str, Any]], for_group: Mapping[str, Any] | None) -> Snapshot:
    """`built` with the devices a preemption freed for another group than `for_group` counted as held."""
    others = {
        d
        for g in podgroups
        if (nominated := nomination(g)) is not None and (for_group is None or g["metadata"]["uid"] != for_group["metadata"]["uid"])
        for d in nominated_devices(nominated)
    }
    return replace(built, held=built.held | others) if others else built
