"""The devices' index is derived once per tuple of devices, and says where each device is."""

from __future__ import annotations

from phalanx.planner import catalog
from phalanx.planner.model import CounterUse, Device, SelectorTerm


def _devices() -> tuple[Device, ...]:
    return (
        Device("gpu.example.com", "n1", "gpu-0", node_name="n1"),
        Device("gpu.example.com", "n1", "gpu-1", node_name="n1", consumes=(CounterUse("memory"),)),
        Device("net.example.com", "fabric", "nic-0", all_nodes=True),
        Device("net.example.com", "rack", "nic-1", node_selector=(SelectorTerm(()),)),
        Device("gpu.example.com", "n2", "gpu-0", node_name="n2"),
    )


def test_a_tuple_is_indexed_once_and_says_where_each_device_is() -> None:
    devices = _devices()
    index = catalog.of(devices)
    assert catalog.of(devices) is index, "the same tuple: the same index, not derived again"
    assert catalog.of(_devices()) is not index and catalog.of(_devices()) == index, "an equal tuple is indexed afresh, alike"
    assert index.local["n1"] == devices[:2] and index.local["n2"] == (devices[4],)
    assert index.local_ids["n1"] == (("gpu.example.com", "n1", "gpu-0"), ("gpu.example.com", "n1", "gpu-1"))
    assert index.network == devices[2:4]
    assert index.consuming == (devices[1],)
    assert index.by_id[("gpu.example.com", "n2", "gpu-0")] is devices[4]


def test_a_list_which_could_change_is_never_kept() -> None:
    devices = list(_devices())
    index = catalog.of(devices)  # type: ignore[arg-type]
    devices.pop()
    assert "n2" not in catalog.of(devices).local and "n2" in index.local  # type: ignore[arg-type]
