"""The webhook configurations that put Phalanx in the path of Job admission.

Kopf serves the webhooks, but its managed configurations only know `url`
client configs and cannot scope by namespace or by content. Phalanx builds its
own, so that the blast radius is as small as the API allows:

* only `batch/v1` Jobs, CREATE and UPDATE (never pods, never status);
* a CEL `matchCondition` sends only Jobs that mention gang scheduling
  (a `scheduling.phalanx.dev/*` annotation, now or before, or `spec.scheduling`);
  any other Job never waits for Phalanx, even when Phalanx is down;
* `kube-system` and the operator's own namespace are excluded, so the
  operator can always be repaired;
* `failurePolicy: Fail` for the Jobs that remain: a gang Job admitted without
  its gate would run pod by pod, which is the failure Phalanx exists to prevent.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from phalanx.api.schema import GROUP

MUTATE_ID = "job-gang-mutate"
VALIDATE_ID = "job-gang-validate"
CONFIGURATION_NAME = f"jobs.{GROUP}"

_MENTIONS_GANG = (
    "(has(object.metadata.annotations) && "
    f"object.metadata.annotations.exists(k, k.startsWith('{GROUP}/'))) || "
    "(has(object.spec) && has(object.spec.scheduling)) || "
    "(oldObject != null && has(oldObject.metadata.annotations) && "
    f"oldObject.metadata.annotations.exists(k, k.startsWith('{GROUP}/')))"
)


@dataclass(frozen=True)
class Endpoint:
    """Where the API server reaches the webhook server: a URL (local) or a Service (in cluster)."""

    url: str | None = None
    service_namespace: str | None = None
    service_name: str | None = None
    service_port: int = 443

    def client_config(self, handler_id: str, ca_pem: bytes) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(ca_pem).decode()}
        if self.url is not None:
            config["url"] = f"{self.url.rstrip('/')}/{handler_id}"
        else:
            config["service"] = {
                "namespace": self.service_namespace,
                "name": self.service_name,
                "port": self.service_port,
                "path": f"/{handler_id}",
            }
        return config


def configurations(endpoint: Endpoint, ca_pem: bytes, operator_namespace: str) -> dict[str, dict[str, Any]]:
    """Kind -> configuration object, ready to create or patch."""

    def webhook(name: str, handler_id: str) -> dict[str, Any]:
        return {
            "name": f"{name}.{GROUP}",
            "clientConfig": endpoint.client_config(handler_id, ca_pem),
            "rules": [
                {
                    "apiGroups": ["batch"],
                    "apiVersions": ["v1"],
                    "resources": ["jobs"],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": sorted({"kube-system", operator_namespace}),
                    }
                ]
            },
            "matchConditions": [{"name": "mentions-gang-scheduling", "expression": _MENTIONS_GANG}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"],
        }

    metadata = {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/name": "phalanx"}}
    mutating = webhook("jobs-mutate", MUTATE_ID)
    mutating["reinvocationPolicy"] = "IfNeeded"
    return {
        "MutatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [mutating],
        },
        "ValidatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [webhook("jobs-validate", VALIDATE_ID)],
        },
    }
