"""kube-scheduler's claim writes held up on demand, by the real API server: a validating webhook that keeps the
scheduler's first write to the claims of chosen pods (PreBind's delete-protection finalizer, before the allocation)
waiting until the test lets it go. Phalanx's own writes pass at once (its ServiceAccount); on the local cluster
kube-scheduler has the admin's identity, so the writes are told apart by whose they are, not by the user.

A slow admission webhook on ResourceClaims (a policy engine, an overloaded one) is what stretches kube-scheduler's
in-flight window in a real cluster: the device is allocated in the scheduler's memory from Reserve on, the pod
shows `status.nominatedNodeName` (the scheduler sets it before PreBind when PreBind has work), and the API shows
the claim unallocated until the write passes admission.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conftest import Cluster

import flakyapi

OPERATOR = "system:serviceaccount:phalanx-system:"
TIMEOUT = 30
"""The API server's limit on a webhook's answer: the hold must end well before it."""


class HeldWrites:
    """Holds the first write (by anyone but Phalanx) to each claim of the pods named `owners` until `let_go()` (or
    `hold` seconds), and says what it held."""

    def __init__(self, owners: set[str], hold: float = 25.0) -> None:
        self.owners = owners
        self.hold = hold
        self.held: list[str] = []
        """Names of the claims whose write was held, in order."""
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.lock = threading.Lock()

    def let_go(self) -> None:
        self.go.set()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        owners = {
            o.get("name")
            for o in ((request.get("object") or {}).get("metadata") or {}).get("ownerReferences") or []
            if o.get("kind") == "Pod"
        }
        phalanx = ((request.get("userInfo") or {}).get("username") or "").startswith(OPERATOR)
        with self.lock:
            hold = bool(owners & self.owners) and not phalanx and request.get("name") not in self.held
            if hold:
                self.held.append(request.get("name") or "")
        if hold:
            self.arrived.set()
            self.go.wait(self.hold)
        return {"uid": request["uid"], "allowed": True}


@contextmanager
def held_claim_writes(cluster: Cluster, namespace: str, held: HeldWrites) -> Iterator[HeldWrites]:
    """Serve `held` on loopback for claim updates in `namespace`; removed on exit (a write still held is let go)."""
    rule = {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["resourceclaims"]}
    with flakyapi.validating_webhook(cluster, namespace, held.review, rule, name="held", timeout=TIMEOUT):
        try:
            yield held
        finally:
            held.let_go()
