"""Transient API answers on demand, from the real API server: a validating webhook that answers the first gate lifts
of chosen pods with a status code of the test's choosing (429 as priority and fairness sends, 503 as an etcd leader
change does), and allows everything else.

The API server passes a webhook's denial code on to the client, so the operator sees exactly the answer it would
see from an overloaded or failing-over control plane, through its real client, on its real write.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from conftest import Cluster

from phalanx.api import keys
from phalanx.kube import tls


def _gated(pod: dict[str, Any] | None) -> bool:
    return any(g.get("name") == keys.SCHEDULING_GATE for g in ((pod or {}).get("spec") or {}).get("schedulingGates") or [])


INDEX = "batch.kubernetes.io/job-completion-index"


class FlakyLifts:
    """Answers the first `times` gate lifts of each pod of an Indexed Job whose index is in `indexes` with `code`,
    `delay` seconds after deciding to (an overloaded server is slow to say so, too), or as soon as `until` is set.
    `code` None: those lifts are let through once held, a write still in flight that far."""

    def __init__(
        self, code: int | None, times: int, indexes: set[str], *, delay: float = 0.0, until: threading.Event | None = None
    ) -> None:
        self.code = code
        self.times = times
        self.indexes = indexes
        self.delay = delay
        self.until = until
        self.answered: Counter[str] = Counter()
        """Pod name -> lifts held so far."""
        self.held_answered = 0
        """How many of those have had their answer."""
        self.lock = threading.Lock()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        meta = (request.get("object") or {}).get("metadata", {})
        name, index = meta.get("name", ""), (meta.get("annotations") or {}).get(INDEX)
        lift = _gated(request.get("oldObject")) and not _gated(request.get("object"))
        with self.lock:
            refuse = lift and index in self.indexes and self.answered[name] < self.times
            if refuse:
                self.answered[name] += 1
        if not refuse:
            return {"uid": request["uid"], "allowed": True}
        if self.until is not None:
            self.until.wait(self.delay)
        else:
            time.sleep(self.delay)
        with self.lock:
            self.held_answered += 1
        if self.code is None:
            return {"uid": request["uid"], "allowed": True}
        return {"uid": request["uid"], "allowed": False, "status": {"code": self.code, "message": "injected transient answer"}}


@contextmanager
def flaky_lifts(cluster: Cluster, namespace: str, flaky: FlakyLifts, *, timeout: int = 5) -> Iterator[FlakyLifts]:
    """Serve `flaky` on loopback and register it for pod updates in `namespace` (the API server waits `timeout`
    seconds for an answer, 30 at most); removed on exit."""
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
    with validating_webhook(cluster, namespace, flaky.review, rule, name="flaky", timeout=timeout):
        yield flaky


@contextmanager
def validating_webhook(
    cluster: Cluster,
    namespace: str,
    review: Callable[[dict[str, Any]], dict[str, Any]],
    rule: dict[str, Any] | list[dict[str, Any]],
    *,
    name: str,
    timeout: int,
) -> Iterator[None]:
    """Serve `review` (an AdmissionReview request -> its response) over TLS on loopback, registered as a validating
    webhook for `rule` (or each of a list) in `namespace` (the API server waits `timeout` s for an answer, 30 at
    most); removed on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": review(body["request"])})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, *_: Any) -> None:
            pass

    with tempfile.TemporaryDirectory() as tmp:
        cert = tls.generate(Path(tmp), ["127.0.0.1"])
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert_file, cert.key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        config_name = f"{name}-{namespace}"
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": config_name},
            "webhooks": [
                {
                    "name": f"{name}.test.phalanx.dev",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{server.server_port}/",
                        "caBundle": base64.b64encode(cert.ca_pem).decode(),
                    },
                    "rules": rule if isinstance(rule, list) else [rule],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": timeout,
                }
            ],
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(config))
        try:
            yield
        finally:
            cluster.kubectl("delete", "validatingwebhookconfiguration", config_name, "--ignore-not-found")
            server.shutdown()
