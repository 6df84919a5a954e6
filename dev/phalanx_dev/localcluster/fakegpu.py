"""The kwok nodes, and a stand-in for dra-example-driver's ResourceSlices.

The real driver's plugin (`dradriver`) publishes the slices of a small
cluster; this stand-in publishes them for simulated clusters of hundreds of
nodes, where a 48 MB process per node does not fit. Its slices copy what
dra-example-driver v0.4.0 publishes with `NUM_DEVICES` (the chart's
`kubeletPlugin.numDevices`): driver `gpu.example.com`, one slice per node
owned by the Node, pool named after the node, devices `gpu-0..gpu-N` with
`index`, `uuid`, `model`, `driverVersion` attributes, `memory` and `compute`
capacity and `allowMultipleAllocations: false`. Only the uuid values differ
(the driver draws them from Go's math/rand seeded by the node name). The
builders are pure so their shape is unit-tested; the async functions talk to
the API server.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx_dev.localcluster.dradriver import DRIVER

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
        "allowMultipleAllocations": False,
    }


def resource_slice(node_name: str, node_uid: str, devices: int) -> dict[str, Any]:
    """One slice per node, owned by the Node so it is collected with it, named as the driver's slice controller names it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": f"00000-{DRIVER}-{node_name}-",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [device(node_name, i) for i in range(devices)],
        },
    }


async def create_nodes(api: client.ApiClient, *, workers: int, control_plane: bool, shape: NodeShape) -> dict[str, str]:
    """Create the kwok nodes (safe to call again); return the workers' UIDs by name."""
    core = client.CoreV1Api(api)
    nodes = [("control-plane", True)] if control_plane else []
    nodes += [(name, False) for name in worker_names(workers)]
    uids = {}
    for name, is_cp in nodes:
        body = node(name, shape, control_plane=is_cp)
        created = await create_once(core.create_node, body) or await core.read_node(name)
        await core.patch_node_status(name, {"status": body["status"]})
        if not is_cp:
            uids[name] = created.metadata.uid
    return uids


async def publish_slices(api: client.ApiClient, workers: dict[str, str], gpus_per_worker: int) -> None:
    """One slice per worker (by name and Node UID), as the driver's plugin would publish it; skips a node that has one."""
    resource = client.ResourceV1Api(api)
    for name, uid in workers.items():
        if not (await resource.list_resource_slice(field_selector=f"spec.nodeName={name},spec.driver={DRIVER}")).items:
            await create_once(resource.create_resource_slice, resource_slice(name, uid, gpus_per_worker))


async def create_once(create: Any, body: dict[str, Any]) -> Any:
    """Create, or return None when it already exists."""
    try:
        return await create(body)
    except ApiException as exc:
        if exc.status == 409:
            return None
        raise
