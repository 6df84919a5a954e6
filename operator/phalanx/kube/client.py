"""Every API write Phalanx makes, in one place, each one idempotent.

Create treats "already exists" as success and returns what is there; patch
treats "gone" as nothing to do. Callers decide; this module never swallows
any other error.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.api.keys import GROUP, VERSION


async def _json_or_none(response: Any) -> dict[str, Any] | None:
    """Raw responses skip the client's status check: 404 is None, any other error raises."""
    raw = await response.read()
    if response.status == 404:
        return None
    if response.status >= 300:
        raise ApiException(status=response.status, reason=raw.decode(errors="replace")[:300])
    return json.loads(raw)


class Kube:
    """The operator's API client for its own objects, Events and webhook configurations."""

    def __init__(self, api: client.ApiClient, *, component: str = "phalanx") -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)
        self.component = component

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def create_custom(self, plural: str, namespace: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create, or return the existing object; the flag says whether this call created it."""
        try:
            return await self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body), True
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = await self.get_custom(plural, namespace, body["metadata"]["name"])
        if existing is None:
            raise RuntimeError(f"{plural}/{body['metadata']['name']} reported to exist but cannot be read")
        return existing, False

    async def patch_custom(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any] | None:
        """A merge patch of one of our objects (or of its status subresource); None when it is gone."""
        call = self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        try:
            return await call(GROUP, VERSION, namespace, plural, name, patch, _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def apply_status(self, kind: str, namespace: str, name: str, status: dict[str, Any], manager: str) -> None:
        """Server-side apply of a status fragment: each writer owns its own conditions, none overwrites another's."""
        plural = kind.lower() + "s"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "status": status}
        try:
            await self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
                field_manager=manager,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh read from the API server (never the cache), as raw JSON; None when gone."""
        response = await client.ResourceV1Api(self.api).read_namespaced_resource_claim(name, namespace, _preload_content=False)
        return await _json_or_none(response)

    async def list_claims(self) -> list[dict[str, Any]]:
        """Every claim in the cluster, read afresh: the race check must not trust any cache."""
        response = await client.ResourceV1Api(self.api).list_resource_claim_for_all_namespaces(_preload_content=False)
        body = await _json_or_none(response)
        if body is None:
            raise ApiException(status=404, reason="resourceclaims are not served")
        return body["items"]

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of a ResourceClaim's metadata/spec; include metadata.resourceVersion to make it conditional."""
        response = await client.ResourceV1Api(self.api).patch_namespaced_resource_claim(
            name, namespace, patch, _content_type="application/merge-patch+json", _preload_content=False
        )
        return json.loads(await response.read())

    async def patch_claim_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        response = await client.ResourceV1Api(self.api).patch_namespaced_resource_claim_status(
            name, namespace, patch, _content_type="application/merge-patch+json", _preload_content=False
        )
        return json.loads(await response.read())

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        response = await self.core.patch_namespaced_pod(
            name, namespace, patch, _content_type="application/merge-patch+json", _preload_content=False
        )
        response.release()  # unread, the connection would stay checked out of the pool

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly this pod (uid precondition); False when it is already gone."""
        try:
            response = await self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": uid}}, _preload_content=False)
            response.release()
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    async def event(self, obj: dict[str, Any], *, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on `obj`, as `kubectl describe` shows them."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC)
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        await self.core.create_namespaced_event(meta["namespace"], body)

    async def apply_webhook_configuration(self, kind: str, body: dict[str, Any]) -> None:
        """Create the configuration, or patch ours in place (caBundle and URL change across restarts)."""
        create, patch = {
            "MutatingWebhookConfiguration": (
                self.admission.create_mutating_webhook_configuration,
                self.admission.patch_mutating_webhook_configuration,
            ),
            "ValidatingWebhookConfiguration": (
                self.admission.create_validating_webhook_configuration,
                self.admission.patch_validating_webhook_configuration,
            ),
        }[kind]
        try:
            await create(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await patch(body["metadata"]["name"], {"webhooks": body["webhooks"]}, _content_type="application/merge-patch+json")
