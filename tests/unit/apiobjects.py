"""API-shaped objects (the dicts the informers hold) for the unit tests: pods, PodGroups, claims, one way.

Defaults make the common case short: a pod of Job `train` in namespace `ml`,
running, with one claim of its own; a gang PodGroup of minCount 2 owned by the
same Job, in disruptionMode all, never scheduled. Each keyword sets one field
as the API server would show it.
"""

from __future__ import annotations

from typing import Any

from phalanx.api import keys

JSON = dict[str, Any]
NAMESPACE = "ml"
JOB_UID = "job-uid"


def owned_by(kind: str = "Job", name: str = "train", uid: str = JOB_UID) -> list[JSON]:
    return [{"apiVersion": "batch/v1" if kind == "Job" else "v1", "kind": kind, "name": name, "uid": uid, "controller": True}]


def pod(
    name: str,
    *,
    namespace: str = NAMESPACE,
    owner: list[JSON] | None = None,
    gated: bool = False,
    node: str | None = None,
    phase: str = "Running",
    claims: tuple[str, ...] | None = None,
) -> JSON:
    """`claims`: the ResourceClaims it names (default: `<name>-gpu` of its own); `owner`: its controller (the Job)."""
    spec: JSON = {
        "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate((f"{name}-gpu",) if claims is None else claims)]
    }
    if gated:
        spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": namespace, "uid": f"{name}-uid", "ownerReferences": owned_by() if owner is None else owner}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pod_group(
    name: str = "train",
    *,
    namespace: str = NAMESPACE,
    uid: str | None = None,
    owner: list[JSON] | None = None,
    min_count: int = 2,
    basic: bool = False,
    mode: str | None = None,
    scheduled: bool | None = None,
    reservation: str | None = None,
    placements: list[JSON] | None = None,
    priority_class: str | None = None,
    **status: Any,
) -> JSON:
    """`scheduled`: PodGroupInitiallyScheduled True or False (None: no condition); `reservation`: its state, with
    `placements` (default none); `mode`: disruptionMode (default all for a gang, single for basic); `status`: more
    status fields as the wire spells them."""
    spec: JSON = {
        "schedulingPolicy": {"basic": {}} if basic else {"gang": {"minCount": min_count}},
        "disruptionMode": {mode or ("single" if basic else "all"): {}},
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    body: JSON = dict(status)
    if scheduled is not None:
        condition = {"type": keys.INITIALLY_SCHEDULED, "status": "True" if scheduled else "False", "reason": "Scheduled", "message": ""}
        body["conditions"] = [condition]
    if reservation is not None:
        body["reservation"] = {"state": reservation, "releasedAt": "2026-12-01T00:00:00Z", "placements": placements or [], "claims": []}
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"{name}-uid",
        "labels": {keys.JOB_NAME_LABEL: name},
        "ownerReferences": owned_by() if owner is None else owner,
    }
    return {"metadata": meta, "spec": spec, "status": body}


def claim(name: str, *devices: str, namespace: str = NAMESPACE) -> JSON:
    """A ResourceClaim, allocated the `devices` (driver d, pool p) when any are given."""
    obj: JSON = {"metadata": {"name": name, "namespace": namespace, "uid": f"{name}-uid"}, "spec": {}, "status": {}}
    if devices:
        obj["status"]["allocation"] = {"devices": {"results": [{"driver": "d", "pool": "p", "device": d} for d in devices]}}
    return obj


def lookup(*claims: JSON) -> Any:
    """`claim(namespace, name)` over these claims, as the view's store answers."""
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    return lambda namespace, name: by_key.get((namespace, name))
