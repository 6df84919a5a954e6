"""The driver stand-in publishes what dra-example-driver publishes, nothing more.

Slices: the stand-in's builders, no cluster. That they equal the real
driver's slices (but for uuid values) is checked against the plugin in
tests/integration/test_localcluster.py.
"""

from __future__ import annotations

from phalanx_dev.localcluster import fakegpu


def test_slice_is_shaped_like_dra_example_driver() -> None:
    spec = fakegpu.resource_slice("worker-1", "uid-1", devices=2)["spec"]
    assert spec["driver"] == "gpu.example.com"
    assert spec["nodeName"] == "worker-1"
    assert spec["pool"] == {"name": "worker-1", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    gpu1 = spec["devices"][1]
    assert gpu1["attributes"]["index"] == {"int": 1}
    assert gpu1["attributes"]["model"] == {"string": "LATEST-GPU-MODEL"}
    assert gpu1["attributes"]["driverVersion"] == {"version": "1.0.0"}
    assert gpu1["attributes"]["uuid"]["string"].startswith("gpu-")
    assert gpu1["capacity"] == {"memory": {"value": "80Gi"}, "compute": {"value": "100"}}
    assert gpu1["allowMultipleAllocations"] is False


def test_slice_is_named_as_the_drivers_slice_controller_names_it() -> None:
    assert fakegpu.resource_slice("worker-1", "uid-1", devices=2)["metadata"]["generateName"] == "00000-gpu.example.com-worker-1-"


def test_device_uuids_are_stable_and_unique() -> None:
    first = [fakegpu.device(n, i)["attributes"]["uuid"]["string"] for n in ("w1", "w2") for i in range(8)]
    again = [fakegpu.device(n, i)["attributes"]["uuid"]["string"] for n in ("w1", "w2") for i in range(8)]
    assert first == again
    assert len(set(first)) == 16


def test_slice_is_owned_by_its_node() -> None:
    (owner,) = fakegpu.resource_slice("worker-2", "uid-2", devices=1)["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", "worker-2", "uid-2")


def test_control_plane_node_is_tainted_and_workers_are_not() -> None:
    shape = fakegpu.NodeShape()
    cp = fakegpu.node("control-plane", shape, control_plane=True)
    worker = fakegpu.node("worker-1", shape)
    assert cp["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert "taints" not in worker["spec"]
    assert worker["status"]["allocatable"] == {"cpu": "32", "memory": "256Gi", "pods": "110"}
