"""A stand-in for dra-example-driver: fake nodes and the ResourceSlices it publishes.

The shapes follow dra-example-driver v0.4.0 (the article's chart with
`kubeletPlugin.numDevices`): driver and DeviceClass `gpu.example.com`, one
slice per node whose pool is named after the node, devices `gpu-0..gpu-N`
with `index`, `uuid`, `model`, `driverVersion` attributes and `memory` and
`compute` capacity. The builders are pure so their shape is unit-tested; only
`publish` talks to the API server.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
MODEL = "LATEST-GPU-MODEL"
DRIVER_VERSION = "1.0.0"
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"
_UUID_NAMESPACE = uuid.UUID("6f1e2b1c-61f4-4a8e-9a53-3f5c2d0b9a10")


@dataclass(frozen=True)
class NodeShape:
    """Allocatable of every fake node; kwok's defaults, which fit any demo."""

    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"


def worker_names(count: int) -> list[str]:
    return [f"worker-{i}" for i in range(1, count + 1)]


def node(name: str, shape: NodeShape, *, control_plane: bool = False) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
    spec: dict[str, Any] = {}
    if control_plane:
        labels[CONTROL_PLANE_TAINT] = ""
        spec["taints"] = [{"key": CONTROL_PLANE_TAINT, "effect": "NoSchedule"}]
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": spec,
        "status": {"allocatable": resources, "capacity": resources},
    }


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


def device(node_name: str, index: int) -> dict[str, Any]:
    gpu_uuid = uuid.uuid5(_UUID_NAMESPACE, f"{node_name}/{index}")
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "uuid": {"string": f"gpu-{gpu_uuid}"},
            "model": {"string": MODEL},
            "driverVersion": {"version": DRIVER_VERSION},
        },
        "capacity": {"memory": {"value": "80Gi"}, "compute": {"value": "100"}},
    }


def resource_slice(node_name: str, node_uid: str, devices: int) -> dict[str, Any]:
    """One slice per node, owned by the Node so it is collected with it, as the driver does."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node_name}-{DRIVER}",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [device(node_name, i) for i in range(devices)],
        },
    }


async def publish(api: client.ApiClient, *, workers: int, gpus_per_worker: int, control_plane: bool, shape: NodeShape) -> None:
    """Create the nodes, the DeviceClass and one slice per worker; safe to call again."""
    core = client.CoreV1Api(api)
    resource = client.ResourceV1Api(api)
    nodes = [("control-plane", True)] if control_plane else []
    nodes += [(name, False) for name in worker_names(workers)]
    for name, is_cp in nodes:
        body = node(name, shape, control_plane=is_cp)
        created = await _create(core.create_node, body) or await core.read_node(name)
        await core.patch_node_status(name, {"status": body["status"]})
        if not is_cp and gpus_per_worker > 0:
            await _create(resource.create_resource_slice, resource_slice(name, created.metadata.uid, gpus_per_worker))
    await _create(resource.create_device_class, device_class())


async def _create(create: Any, body: dict[str, Any]) -> Any:
    try:
        return await create(body)
    except ApiException as exc:
        if exc.status == 409:
            return None
        raise
