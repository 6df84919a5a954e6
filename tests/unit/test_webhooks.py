"""The webhook configurations: scoped to gang Jobs, reachable by URL locally and by Service in a cluster."""

from __future__ import annotations

import base64

from phalanx import webhooks


def test_local_endpoint_is_a_url_per_handler() -> None:
    configs = webhooks.configurations(webhooks.Endpoint(url="https://127.0.0.1:9443"), b"CA", "phalanx-system")
    (mutating,) = configs["MutatingWebhookConfiguration"]["webhooks"]
    (validating,) = configs["ValidatingWebhookConfiguration"]["webhooks"]
    assert mutating["clientConfig"] == {"caBundle": base64.b64encode(b"CA").decode(), "url": "https://127.0.0.1:9443/job-gang-mutate"}
    assert validating["clientConfig"]["url"] == "https://127.0.0.1:9443/job-gang-validate"


def test_in_cluster_endpoint_is_a_service() -> None:
    endpoint = webhooks.Endpoint(service_namespace="phalanx-system", service_name="phalanx-webhook")
    configs = webhooks.configurations(endpoint, b"CA", "phalanx-system")
    client = configs["ValidatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]
    assert "url" not in client
    assert client["service"] == {"namespace": "phalanx-system", "name": "phalanx-webhook", "port": 443, "path": "/job-gang-validate"}


def test_blast_radius_is_gang_jobs_outside_system_namespaces() -> None:
    configs = webhooks.configurations(webhooks.Endpoint(url="https://x"), b"CA", "phalanx-system")
    for config in configs.values():
        (hook,) = config["webhooks"]
        assert hook["failurePolicy"] == "Fail"
        assert hook["rules"] == [
            {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
        ]
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert (expr["operator"], expr["values"]) == ("NotIn", ["kube-system", "phalanx-system"])
        (condition,) = hook["matchConditions"]
        assert "scheduling.phalanx.dev/" in condition["expression"] and "spec.scheduling" in condition["expression"]
