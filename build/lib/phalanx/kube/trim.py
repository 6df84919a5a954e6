"""What the informers keep of each object: what the operator reads, so the cache grows with the cluster's size, not its verbosity.

Every object loses `managedFields` and kubectl's last-applied annotation
(together often more than half of an object). A claim keeps, of its
managedFields, only when its allocation was written (the double-allocation
repair orders holders by it). A pod keeps of its containers what scheduling
reads (requests, ports, restartPolicy) and of its status what loss detection
and claim lookup read; volumes and the rest of the container specs go. A
node loses its image list. Objects are trimmed in place: they come fresh
from a list or a watch event and nobody else holds them.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONTAINER_FIELDS = ("name", "resources", "ports", "restartPolicy")
POD_STATUS_FIELDS = ("phase", "conditions", "resourceClaimStatuses", "nominatedNodeName", "reason", "startTime")


def common(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        del annotations[LAST_APPLIED]
    return obj


def _container(container: JSON) -> JSON:
    return {k: container[k] for k in CONTAINER_FIELDS if k in container}


def pod(obj: JSON) -> JSON:
    common(obj)
    spec = obj.get("spec") or {}
    spec.pop("volumes", None)
    spec.pop("ephemeralContainers", None)
    for kind in ("containers", "initContainers"):
        if spec.get(kind):
            spec[kind] = [_container(c) for c in spec[kind]]
    status = obj.get("status") or {}
    kept = {k: status[k] for k in POD_STATUS_FIELDS if k in status}
    if status.get("containerStatuses"):
        kept["containerStatuses"] = [{"name": s.get("name"), "state": s.get("state") or {}} for s in status["containerStatuses"]]
    obj["status"] = kept
    return obj


def node(obj: JSON) -> JSON:
    common(obj)
    status = obj.get("status") or {}
    for bulky in ("images", "volumesInUse", "volumesAttached"):
        status.pop(bulky, None)
    return obj


def claim(obj: JSON) -> JSON:
    """managedFields reduced to the status writes that own the allocation, with their time."""
    meta = obj.get("metadata") or {}
    entries = meta.pop("managedFields", None) or []
    allocations = [
        {"subresource": "status", "time": e.get("time", ""), "fieldsV1": {"f:status": {"f:allocation": {}}}}
        for e in entries
        if e.get("subresource") == "status" and "f:allocation" in ((e.get("fieldsV1") or {}).get("f:status") or {})
    ]
    common(obj)
    if allocations:
        meta["managedFields"] = allocations
    return obj
