"""What the informers keep of each object: what the operator reads, so the cache grows with the cluster's size, not its verbosity.

Every object loses `managedFields` and kubectl's last-applied annotation
(together often more than half of an object). A claim keeps, of its
managedFields, only when its allocation was written (the double-allocation
repair orders holders by it). A pod keeps of its containers what scheduling
reads (requests, ports, restartPolicy) and of its status what loss detection,
readiness and claim lookup read (its containers' and init containers'
states only for a gang member, an init container's only while it is not
ready); volumes and the rest of the container specs go. A node keeps of its
status only what it can allocate: its conditions, addresses and images go, so
a heartbeat changes nothing kept. Objects are trimmed in place: they come fresh
from a list or a watch event and nobody else holds them.

What is kept is then rebuilt with every key and every short string interned
(`compact`): a JSON decoder makes a new string for each key and value of each
event, so 100,000 pods would otherwise hold 100,000 copies of "metadata",
"Running", "True", each node's name and each label (about half of a trimmed
pod's memory; `./task bench -- --scale` measures it).
"""

from __future__ import annotations

import sys
from typing import Any

from phalanx.api import keys

JSON = dict[str, Any]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONTAINER_FIELDS = ("name", "resources", "ports", "restartPolicy")
POD_STATUS_FIELDS = ("phase", "conditions", "resourceClaimStatuses", "nominatedNodeName", "reason")
POD_SPEC_UNREAD = (
    "volumes",
    "ephemeralContainers",
    "dnsPolicy",
    "dnsConfig",
    "enableServiceLinks",
    "hostAliases",
    "hostname",
    "subdomain",
    "imagePullSecrets",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "automountServiceAccountToken",
    "schedulerName",
    "terminationGracePeriodSeconds",
    "readinessGates",
)
"""Defaulted or runtime-only pod fields no reader in the operator looks at (the webhooks read their request, not this)."""
NODE_STATUS_FIELDS = ("allocatable",)
"""Of a node's status, what the planner reads (the loop counts a node lost when it is gone, not by its conditions)."""
CONDITION_FIELDS = ("type", "status", "reason", "message")
"""Of a pod's condition: its times are never read (the loop reads a PodGroup's or a Job's, not a pod's)."""
CONDITION_TYPES = ("Ready", keys.DISRUPTION_TARGET)
"""The pod conditions anything reads: readiness (ready deadline, disruption budgets) and the disruption mark."""
MEMBER_ONLY = ("tolerations", "nodeSelector", "topologySpreadConstraints", "preemptionPolicy")
"""What only a gang member's plan reads (`inputs.member`, `victims`); of its status, its containers' and init
containers' states are read only for a member too (why it was lost, why it is not Ready: `disruption`, `podsready`).
Of the affinity of a pod that is no member, only podAntiAffinity is read (`inputs.existing`: other pods' plans must
respect it)."""
MEMBER_CONTROLLERS: dict[str, str | None] = {"Job": None, "StatefulSet": "leaderworkerset.sigs.k8s.io/name"}
"""The controllers of gang members' pods, with the label such a pod must carry too (None: none): a Job's, and a
JobSet's, whose members are its Jobs' pods; a LeaderWorkerSet's, whose members are pods of its StatefulSets with
LWS's name label (`leaderworkersets.admission.NAME_LABEL`), so a StatefulSet of anything else is trimmed as before. A
test checks a member of each workload kind in `phalanx.kinds`; a pod controlled by none of these, not held by the
gang gate and not labelled into a PodGroup, is kept without MEMBER_ONLY."""
INTERN_UP_TO = 64
"""Strings up to this long are interned: keys, phases, node and label values, ...; a longer one is rarely repeated."""


SHARE_UP_TO = 4
"""Dicts and lists of up to this many entries, each a scalar or itself shared, are shared between objects."""
SHARED_KEPT = 50_000
"""Distinct small parts `compact` remembers; past it, it starts afresh (what was shared stays shared, only what
comes next shares with the new set)."""
_SHARED: dict[tuple[Any, ...], Any] = {}
_SCALARS = (str, int, float, bool, type(None))


def compact(value: Any) -> Any:
    """The same JSON, rebuilt with its keys and short strings interned, and its small parts shared: equal, smaller.

    Interned strings are freed once the last object holding them goes. A part is shared when it is small and made
    only of scalars and other shared parts (a container's requests, a label set, a device's attribute value, a
    condition, and so up to a pod's whole spec when its pods share a template and a node): ten thousand pods of one
    Job then hold one copy. Nothing may change a kept object in place: every reader in the operator builds new
    objects from them."""
    return _compact(value)[0]


def _compact(value: Any) -> tuple[Any, bool]:
    """(the value compacted, whether it is a scalar or a shared part, which a parent may share in turn)."""
    if isinstance(value, dict):
        parts = [(sys.intern(k), *_compact(v)) for k, v in value.items()]
        out: Any = {k: v for k, v, _ in parts}
    elif isinstance(value, list):
        parts = [(i, *_compact(v)) for i, v in enumerate(value)]
        out = [v for _, v, _ in parts]
    elif isinstance(value, str):
        return (sys.intern(value) if len(value) <= INTERN_UP_TO else value), True
    else:
        return value, isinstance(value, _SCALARS)
    if len(parts) > SHARE_UP_TO or not all(shareable for _, _, shareable in parts):
        return out, False
    # scalars by type and value (True is not 1), shared parts by identity (the table keeps them alive while it holds them)
    key = (type(out), *((k, v.__class__, v if isinstance(v, _SCALARS) else id(v)) for k, v, _ in parts))
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()
        found = _SHARED[key] = out
    return found, True


def _common(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        del annotations[LAST_APPLIED]
    return obj


def common(obj: JSON) -> JSON:
    """Any object: managedFields and the last-applied annotation go."""
    return compact(_common(obj))  # type: ignore[no-any-return]


def _container(container: JSON) -> JSON:
    return {k: container[k] for k in CONTAINER_FIELDS if k in container}


def _init_status(status: JSON) -> JSON:
    """Of an init container's status, what `podsready.why_not` reads: the state only of one not ready (one that
    completed is ready, and then only its `ready` is read), so a running member keeps of each init container a small
    part shared by every pod of its template, not its last run's times and container id."""
    ready = status.get("ready", False)
    kept = {"name": status.get("name"), "ready": ready, "restartCount": status.get("restartCount", 0)}
    if not ready:
        kept["state"] = status.get("state") or {}
    return kept


def _may_be_member(obj: JSON) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    gates = (obj.get("spec") or {}).get("schedulingGates") or []
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        keys.POD_GROUP_LABEL in labels
        or any(
            r.get("controller") and r.get("kind") in MEMBER_CONTROLLERS and MEMBER_CONTROLLERS[r["kind"]] in (None, *labels) for r in refs
        )
        or any(g.get("name") == keys.SCHEDULING_GATE for g in gates)
    )


def pod(obj: JSON) -> JSON:
    _common(obj)
    spec = obj.get("spec") or {}
    for unread in POD_SPEC_UNREAD:
        spec.pop(unread, None)
    if not _may_be_member(obj):
        for unread in MEMBER_ONLY:
            spec.pop(unread, None)
        anti = (spec.pop("affinity", None) or {}).get("podAntiAffinity")
        if anti:
            spec["affinity"] = {"podAntiAffinity": anti}
    for kind in ("containers", "initContainers"):
        if spec.get(kind):
            spec[kind] = [_container(c) for c in spec[kind]]
    status = obj.get("status") or {}
    kept = {k: status[k] for k in POD_STATUS_FIELDS if k in status}
    if status.get("conditions"):
        kept["conditions"] = [
            {k: c[k] for k in CONDITION_FIELDS if k in c} for c in status["conditions"] if c.get("type") in CONDITION_TYPES
        ]
    if status.get("containerStatuses") and _may_be_member(obj):  # read of members only: their losses, their readiness
        kept["containerStatuses"] = [
            {"name": s.get("name"), "state": s.get("state") or {}, "ready": s.get("ready", False), "restartCount": s.get("restartCount", 0)}
            for s in status["containerStatuses"]
        ]
    if status.get("initContainerStatuses") and _may_be_member(obj):  # read of members only: why one is not Ready
        kept["initContainerStatuses"] = [_init_status(s) for s in status["initContainerStatuses"]]
    obj["status"] = kept
    return compact(obj)  # type: ignore[no-any-return]


def node(obj: JSON) -> JSON:
    """Of its status only `allocatable`: the planner reads a node's name, labels, taints, schedulability and
    allocatable, never its conditions. A heartbeat (the kubelet's, kwok's) writes only those conditions' times, so
    what is kept of it is the node as before, and the informer does not wake the loop for it."""
    _common(obj)
    status = obj.get("status") or {}
    obj["status"] = {k: status[k] for k in NODE_STATUS_FIELDS if k in status}
    return compact(obj)  # type: ignore[no-any-return]


def claim(obj: JSON) -> JSON:
    """managedFields reduced to the status writes that own the allocation, with their time."""
    meta = obj.get("metadata") or {}
    entries = meta.pop("managedFields", None) or []
    allocations = [
        {"subresource": "status", "time": e.get("time", ""), "fieldsV1": {"f:status": {"f:allocation": {}}}}
        for e in entries
        if e.get("subresource") == "status" and "f:allocation" in ((e.get("fieldsV1") or {}).get("f:status") or {})
    ]
    _common(obj)
    if allocations:
        meta["managedFields"] = allocations
    return compact(obj)  # type: ignore[no-any-return]
