"""Whether releasing one plan takes room a group ahead of it in the queue could use now: pure, on one snapshot.

The queue's rule (the loop applies it, `phalanx.scheduling.queue` orders it):
a group is released only if no group ahead of it (higher priority, or the
same and older) could use the same room now. "Could use now" is decided on
the snapshot the later group was planned on: the group ahead fits on it, and
no longer fits once the later plan is counted as placed (`with_plan`). A
group ahead that does not fit even on the whole free room holds nothing back:
what it cannot use goes to those behind (backfill).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from decimal import Decimal

from phalanx.planner.devices import DeviceMatcher
from phalanx.planner.model import DeviceId, Group, Pod, Snapshot, frozen_map
from phalanx.planner.placement import Fits, plan


def with_plan(snapshot: Snapshot, fits: Fits) -> Snapshot:
    """The snapshot as it will be once `fits` is released: each member's requests (and one `pods`) on its node, as
    `Node.requested` counts them, except the extended resources a DeviceClass serves there (the node publishes none
    of them, its devices count them); every device its claims and its planned extended resources take held, a share
    adding what it consumes; each member among the placed pods, for the rules other pods read."""
    if not fits.placements:
        return snapshot
    added: dict[str, Counter[str]] = {}
    by_name = {n.name: n for n in snapshot.nodes}
    for member, node in fits.placements:
        amounts = added.setdefault(node, Counter())
        allocatable = by_name[node].allocatable if node in by_name else {}
        amounts.update({k: v for k, v in member.requests.items() if allocatable.get(k, 0) > 0})
        amounts["pods"] += 1
    held: set[DeviceId] = set()
    shared = {d: dict(c) for d, c in snapshot.shared.items()}
    for claim in (*fits.claims, *fits.planned):
        for result in claim.results:
            if result.share_id is not None:
                used = shared.setdefault(result.device_id, {})
                for name, value in result.consumed.items():
                    used[name] = used.get(name, Decimal(0)) + value
            elif not result.admin_access:
                held.add(result.device_id)
    nodes = []
    for node in snapshot.nodes:
        more = added.get(node.name)
        if more:
            requested = Counter(node.requested)
            requested.update(more)
            node = replace(node, requested=frozen_map(requested))
        nodes.append(node)
    placed = tuple(
        Pod(m.namespace, m.name, node, m.labels, m.pod_anti_affinity, m.host_ports) for m, node in fits.placements if node in by_name
    )
    return replace(
        snapshot,
        nodes=tuple(nodes),
        held=snapshot.held | held,
        shared=frozen_map({d: frozen_map(c) for d, c in shared.items()}),
        pods=snapshot.pods + placed,
    )


def takes_room(snapshot: Snapshot, ahead: Group, behind: Fits, matcher: DeviceMatcher | None = None) -> bool:
    """True when `ahead` fits on `snapshot` now and would not once `behind` is placed: releasing `behind` would take
    room `ahead` could use. False when `ahead` does not fit at all (backfill), or fits beside `behind`."""
    if not isinstance(plan(snapshot, ahead, matcher), Fits):
        return False
    return not isinstance(plan(with_plan(snapshot, behind), ahead, matcher), Fits)


def devices_of(fits: Fits) -> frozenset[DeviceId]:
    """The devices a plan takes whole: its claims' and its planned extended resources' results, not shares nor admin access."""
    return frozenset(
        r.device_id for claim in (*fits.claims, *fits.planned) for r in claim.results if r.share_id is None and not r.admin_access
    )


def hold_for(
    snapshot: Snapshot, group: Group, kept: frozenset[DeviceId] = frozenset(), matcher: DeviceMatcher | None = None
) -> frozenset[DeviceId] | None:
    """The devices to hold for `group` at the head of the line: those its plan needs on the cluster as if no device
    were in use (`snapshot.held` keeps only what is held for others, e.g. a preemptor's), packed as every plan is.
    `kept`, the hold it has, stays (what of it the plan still uses) as long as the group fits on those devices alone,
    so a hold does not move with every pod that comes and goes, and shrinks with the gang. None when it cannot fit even on an empty cluster: holding would not help."""
    emptied = replace(snapshot, shared=frozen_map({}))
    if kept:
        others = frozenset(d.id for d in snapshot.devices) - kept
        on_kept = plan(replace(emptied, held=emptied.held | others), group, matcher)
        if isinstance(on_kept, Fits):
            return devices_of(on_kept)
    result = plan(emptied, group, matcher)
    return devices_of(result) if isinstance(result, Fits) else None
