"""Where a snapshot's devices are: by id, on each node, reaching nodes over the network.

Indexing 40,000 devices (5,000 nodes x 8) took half of a gang of 3's plan, done again for every plan. The index
depends on the tuple of devices alone, and the snapshot builder hands the planner the very same tuple while no
ResourceSlice or DeviceTaintRule changed (`scheduling.deviceinputs.published`), so it is kept by that tuple's identity,
the tuple held beside it (an id is never reused while its object lives). Pure in effect: the same tuple gives the
same index, however it was reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from phalanx.planner.model import Device, DeviceId

KEPT = 2
"""Tuples of devices remembered: the current one, and the one before, which a plan may still be running on."""


@dataclass(frozen=True, slots=True)
class Catalog:
    by_id: Mapping[DeviceId, Device]
    """The last device published with each id."""
    local: Mapping[str, tuple[Device, ...]]
    """Node name -> its node-local devices, as published."""
    local_ids: Mapping[str, tuple[DeviceId, ...]]
    """Node name -> the ids of `local`, in the same order (a free count reads them, not the devices)."""
    nodes_of: Mapping[DeviceId, tuple[str, ...]]
    """Device id -> the node of each node-local device published with it (once per device in `local_ids`)."""
    network: tuple[Device, ...]
    """Devices not local to one node (a node selector, or every node)."""
    consuming: tuple[Device, ...]
    """Devices that consume shared counters."""


_kept: tuple[tuple[tuple[Device, ...], Catalog], ...] = ()


def of(devices: tuple[Device, ...]) -> Catalog:
    """The index of `devices`, derived once per tuple (a list, which could change, is indexed each call)."""
    global _kept
    for seen, catalog in _kept:
        if seen is devices:
            return catalog
    catalog = _index(devices)
    if type(devices) is tuple:
        _kept = ((devices, catalog), *_kept[: KEPT - 1])  # one assignment: a plan in another thread sees either
    return catalog


def _index(devices: tuple[Device, ...]) -> Catalog:
    local: dict[str, list[Device]] = {}
    nodes_of: dict[DeviceId, tuple[str, ...]] = {}
    network: list[Device] = []
    for device in devices:
        if device.node_name is not None:
            local.setdefault(device.node_name, []).append(device)
            nodes_of[device.id] = (*nodes_of.get(device.id, ()), device.node_name)
        else:
            network.append(device)
    return Catalog(
        by_id={d.id: d for d in devices},
        local={n: tuple(found) for n, found in local.items()},
        local_ids={n: tuple(d.id for d in found) for n, found in local.items()},
        nodes_of=nodes_of,
        network=tuple(network),
        consuming=tuple(d for d in devices if d.consumes),
    )
