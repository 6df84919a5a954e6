"""Where a running pod that kube-scheduler unreserved from its still-allocated claim is reserved again.

kube-scheduler's DynamicResources `Unreserve` strategic-merge-deletes the pod from each claim's `reservedFor`
whenever a binding cycle fails (v1.37.2, dynamicresources.go), and leaves the allocation. For a pod that is not
bound, its next scheduling cycle adds it back. For one whose bind committed while the answer was lost (an API server
killed under it) nothing does: kube-scheduler is done with a bound pod, the resourceclaim controller only removes
consumers, and the kubelet refuses to prepare a claim not reserved for the pod ("not allowed to use resource
claim"), so the pod never starts, on devices no one else can have. Phalanx reserved those claims for its gangs, and
puts the pod back.

The claims watch notes each pod an allocated claim stops listing while its allocation stays (`note`); the loop's
first cycle also finds allocated claims that do not list the pod that owns them (`scan`: a strip before this
replica was watching). A noted pod is reserved again only once it is bound, still references the claim, sits on
the allocation's node and, read afresh, may still run; one not yet bound is left to kube-scheduler's next cycle
and kept in view. The write appends the pod, conditional on the claim as read; the admission policy
`phalanx-operator-claims` lets the operator add only the claim's owner pod, or a pod to a claim a PodGroup of
ours controls, with the allocation unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.kube.client import Kube, claim_path, pod_path
from phalanx.scheduling.accessors import claim_names, may_run, pinned_node

logger = logging.getLogger(__name__)

ClaimKey = tuple[str, str]
Consumer = tuple[str, str]
"""A pod consumer: (name, uid)."""

RESERVED_AGAIN = "ClaimReservedAgain"
"""The Warning Event on a pod whose claim Phalanx reserved for it again."""
MAX_RESERVED_FOR = 256
"""The API server's limit on a claim's `reservedFor` (ResourceClaimReservedForMaxSize)."""


def _allocation(claim: Mapping[str, Any] | None) -> Any:
    return ((claim or {}).get("status") or {}).get("allocation")


def _listed(claim: Mapping[str, Any]) -> set[Consumer]:
    return {
        (r["name"], r["uid"])
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if r.get("resource") == "pods" and not r.get("apiGroup")
    }


def _owners(claim: Mapping[str, Any]) -> set[Consumer]:
    return {
        (o["name"], o["uid"])
        for o in claim["metadata"].get("ownerReferences") or []
        if o.get("kind") == "Pod" and o.get("apiVersion") == "v1"
    }


def _key(claim: Mapping[str, Any]) -> ClaimKey:
    return (claim["metadata"]["namespace"], claim["metadata"]["name"])


@dataclass(frozen=True)
class Restore:
    claim: Mapping[str, Any]
    """As the watch shows it: the write is conditional on this version."""
    pod: Mapping[str, Any]


class Unreserved:
    """Pods each allocated claim stopped listing, as the claims watch saw them go; forgotten once listed again, once
    the claim is deallocated or gone, or once the loop finds nothing to restore."""

    def __init__(self) -> None:
        self.lost: dict[ClaimKey, frozenset[Consumer]] = {}

    def note(self, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> None:
        """Told of every claim write the watch delivers (or a relist shows)."""
        key, allocation = _key(after), _allocation(after)
        if not allocation:
            self.lost.pop(key, None)
            return
        listed = _listed(after)
        lost = set(self.lost.get(key, ()))
        if before is not None and before["metadata"].get("uid") == after["metadata"].get("uid") and _allocation(before) == allocation:
            lost |= _listed(before) - listed
        self._keep(key, lost - listed)

    def gone(self, claim: Mapping[str, Any]) -> None:
        self.lost.pop(_key(claim), None)

    def scan(self, claims: Iterable[Mapping[str, Any]]) -> None:
        """Allocated claims that do not list the pod that owns them: stripped before this replica watched."""
        for claim in claims:
            if _allocation(claim):
                missing = _owners(claim) - _listed(claim)
                if missing:
                    self._keep(_key(claim), missing | set(self.lost.get(_key(claim), ())))

    def _keep(self, key: ClaimKey, lost: set[Consumer]) -> None:
        if lost:
            self.lost[key] = frozenset(lost)
        else:
            self.lost.pop(key, None)

    def due(
        self,
        claim: Callable[[str, str], Mapping[str, Any] | None],
        pod: Callable[[str, str], Mapping[str, Any] | None],
        reserved_by_us: Callable[[ClaimKey], bool],
    ) -> list[Restore]:
        """The noted pods to reserve again now, as the watch shows them; a pod that cannot be (gone, replaced, stopped,
        no longer using the claim, on another node than the allocation) is forgotten, one not yet bound is kept."""
        out = []
        for key, lost in list(self.lost.items()):
            obj = claim(*key)
            if obj is None or not _allocation(obj) or not reserved_by_us(key):
                self.lost.pop(key, None)
                continue
            kept = set()
            for name, uid in sorted(lost - _listed(obj)):
                user = pod(key[0], name)
                if user is None or user["metadata"]["uid"] != uid or not may_run(user) or key[1] not in (claim_names(user) or ()):
                    continue
                node = user["spec"].get("nodeName")
                if not node:
                    kept.add((name, uid))  # kube-scheduler reserves it again in its next cycle; if the bind lands instead, we do
                    continue
                allocated_on = pinned_node(_allocation(obj))
                if allocated_on is not None and allocated_on != node:
                    logger.warning("%s/%s: %s is bound to %s, its allocation to %s; not reserved again", *key, name, node, allocated_on)
                    continue
                kept.add((name, uid))
                out.append(Restore(obj, user))
            self._keep(key, kept)
        return out


async def restore(kube: Kube, todo: Restore) -> bool:
    """Append the pod to the claim's `reservedFor`, conditional on the claim as the watch showed it, after a fresh
    read finds it still bound and running. False, with nothing written, when it is not; a lost race raises
    `Conflict` (the next write the watch shows is judged again)."""
    meta, pod_meta = todo.claim["metadata"], todo.pod["metadata"]
    fresh = await kube.get(pod_path(pod_meta["namespace"], pod_meta["name"]))
    if fresh is None or fresh["metadata"]["uid"] != pod_meta["uid"] or not fresh["spec"].get("nodeName") or not may_run(fresh):
        return False
    users = list((todo.claim.get("status") or {}).get("reservedFor") or [])
    if len(users) >= MAX_RESERVED_FOR:
        logger.warning(
            "%s/%s: reservedFor is full (%d); %s not reserved again", meta["namespace"], meta["name"], len(users), pod_meta["name"]
        )
        return False
    users.append({"resource": "pods", "name": pod_meta["name"], "uid": pod_meta["uid"]})
    await kube.merge_patch(
        claim_path(meta["namespace"], meta["name"], status=True),
        {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {"reservedFor": users}},
    )
    message = (
        f"claim {meta['name']} was unreserved from this bound pod while it kept its devices "
        "(kube-scheduler's Unreserve after a binding whose answer was lost); reserved for it again so the kubelet may prepare it"
    )
    await kube.event(
        {"apiVersion": "v1", "kind": "Pod", "metadata": fresh["metadata"]}, type_="Warning", reason=RESERVED_AGAIN, message=message
    )
    return True
