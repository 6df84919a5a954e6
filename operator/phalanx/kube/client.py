"""Every API call Phalanx makes, in one place: JSON in, JSON out, and any non-2xx answer raises.

Each error is typed by what the caller must do about it: `NotFound` (the
object is gone), `Conflict` (a precondition or resourceVersion lost, or it
already exists: re-read and decide again), `Invalid` (the request can never
succeed as written), `Forbidden` (a policy or RBAC refused it), `Throttled`
(429: an eviction a PodDisruptionBudget refuses, or API priority and
fairness: retry later). Reads of a single object return None when it is
gone; writes never hide an error, the caller handles the cases that matter
where they matter. The one exception is `event`: like client-go's recorder,
a refused Event is logged and never fails the work it reports (`event_once`,
which must know, raises).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.api import times
from phalanx.api.keys import GROUP, VERSION

logger = logging.getLogger(__name__)

T = TypeVar("T")

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
PAGE = 500
"""Objects per list page: the page size client-go's reflector uses."""


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Invalid(ApiError):
    pass


class Forbidden(ApiError):
    pass


class Throttled(ApiError):
    pass


UNANSWERED: tuple[type[Exception], ...] = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request raises when no answer came (the API server down or restarting, the connection cut): unlike an
`ApiError` it says nothing of the request, which may or may not have been applied. Loops that must outlive an
outage (leader election, certificate refresh) count it as one failed attempt."""

REQUEST_TIMEOUT = 30.0
"""Seconds a request (not a watch) may take in all: a connection left half open by a partition ends as a
`TimeoutError` (one of `UNANSWERED`) instead of holding the loop or the Lease renewal for good."""

_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 422: Invalid, 403: Forbidden, 429: Throttled}


def _typed(exc: ApiException) -> ApiError:
    body: Any = exc.body
    try:
        status_obj = json.loads(body) if body else {}
    except (TypeError, ValueError):
        status_obj = {}
    message = status_obj.get("message") if isinstance(status_obj, dict) else None
    reason = (status_obj.get("reason") if isinstance(status_obj, dict) else None) or exc.reason or ""
    return _BY_STATUS.get(exc.status, ApiError)(exc.status, str(reason), str(message or body or "")[:2000])


TRANSIENT = frozenset({429, 500, 502, 503, 504})
"""Answers about the API server's state, not the request's merit (priority and fairness shedding load, an etcd
leader change, a timeout between its own parts): the same idempotent write may well succeed a moment later."""


async def retried(call: Callable[[], Awaitable[T]], *, attempts: int = 5, pause: float = 0.2) -> T:
    """An idempotent request sent again after each transient answer, the pause doubling (0.2 s to 1.6 s, 3 s in
    all); a refusal, or the last transient answer, is raised."""
    for attempt in range(attempts):
        try:
            return await call()
        except ApiError as exc:
            if exc.status not in TRANSIENT or attempt == attempts - 1:
                raise
            logger.info("transient answer %s, sending again in %.1fs", exc, pause * 2**attempt)
            await asyncio.sleep(pause * 2**attempt)
    raise AssertionError("attempts must be at least 1")


async def all_answered(calls: Iterable[Awaitable[Any]]) -> list[Any]:
    """Run requests concurrently; every one has its answer before the first error is raised, so nothing is left in
    flight behind a failure (a write the caller then undoes must not land after the undo)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def custom_path(plural: str, namespace: str, name: str | None = None, *, status: bool = False) -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
    if name is not None:
        path += f"/{name}"
    return path + ("/status" if status else "")


def claim_path(namespace: str, name: str, *, status: bool = False) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}" + ("/status" if status else "")


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")


IN_FLIGHT = 64
"""Requests one client has in flight at most (fewer if its connection pool is smaller); the rest wait their turn
before their REQUEST_TIMEOUT starts. Sent all at once, 2,048 gate lifts waited for one of the pool's connections
inside their own 30 s, timed out, and failed the release twice (the 5,000-node bench)."""


class Kube:
    """The operator's API client; every method either succeeds or raises an `ApiError`."""

    def __init__(self, api: client.ApiClient, *, component: str = "phalanx") -> None:
        self.api = api
        self.component = component
        self._slots = asyncio.Semaphore(min(IN_FLIGHT, api.configuration.connection_pool_maxsize or IN_FLIGHT))

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, Any] | None = None,
    ) -> JSON:
        async with self._slots:
            try:
                return await self.api.call_api(
                    path,
                    method,
                    query_params=list((query or {}).items()),
                    header_params={"Content-Type": content_type, "Accept": "application/json"},
                    body=body,
                    response_types_map={200: "object", 201: "object", 202: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            except ApiException as exc:
                raise _typed(exc) from None

    async def get(self, path: str) -> JSON | None:
        """A fresh read (never a cache); None when the object is gone."""
        try:
            return await self.request("GET", path)
        except NotFound:
            return None

    async def create(self, path: str, body: JSON) -> JSON:
        return await self.request("POST", path, body)

    async def replace(self, path: str, body: JSON) -> JSON:
        """PUT: conditional on the body's `metadata.resourceVersion` (a lost race is a `Conflict`)."""
        return await self.request("PUT", path, body)

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        """Include `metadata.resourceVersion` in the patch to make it conditional (a lost race is a `Conflict`).

        Written under our field manager, so managedFields tell when Phalanx wrote what.
        """
        return await self.request("PATCH", path, patch, content_type=MERGE_PATCH, query={"fieldManager": self.component})

    async def json_patch(self, path: str, patch: list[JSON]) -> JSON:
        """RFC 6902: exact paths, and `test` operations that refuse the patch when the object is not as expected."""
        return await self.request("PATCH", path, patch, content_type=JSON_PATCH, query={"fieldManager": self.component})

    async def strategic_patch(self, path: str, patch: JSON) -> JSON:
        """For built-in kinds whose lists merge by key (a pod's conditions by type)."""
        return await self.request("PATCH", path, patch, content_type=STRATEGIC_PATCH, query={"fieldManager": self.component})

    async def apply(self, path: str, body: JSON, manager: str) -> JSON:
        """Server-side apply: each writer owns its own fields, none overwrites another's."""
        return await self.request("PATCH", path, body, content_type=APPLY_PATCH, query={"fieldManager": manager, "force": "true"})

    async def delete(self, path: str, *, uid: str | None = None) -> JSON:
        """Delete, exactly the object with `uid` when given (another one of the same name is a `Conflict`)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        return await self.request("DELETE", path, body)

    async def create_custom(self, plural: str, namespace: str, body: JSON) -> tuple[JSON, bool]:
        """Create one of our objects, or return the existing one; the flag says whether this call created it."""
        try:
            return await self.create(custom_path(plural, namespace), body), True
        except Conflict:
            existing = await self.get(custom_path(plural, namespace, body["metadata"]["name"]))
            if existing is None:
                raise
            return existing, False

    async def apply_status(
        self, kind: str, namespace: str, name: str, status: JSON, manager: str, *, resource_version: str | None = None
    ) -> JSON:
        """Server-side apply of one of our objects' status; with `resource_version`, only while the object is at it
        (else Conflict)."""
        meta = {"name": name, "namespace": namespace} | ({"resourceVersion": resource_version} if resource_version else {})
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta, "status": status}
        return await self.apply(custom_path(kind.lower() + "s", namespace, name, status=True), body, manager)

    async def pages(self, path: str, *, limit: int = PAGE) -> AsyncIterator[JSON]:
        """A list read in pages of `limit` (one consistent snapshot): never the whole collection in one answer.

        Each page is yielded as the API server sent it; the last one carries the list's resourceVersion.
        """
        token = None
        while True:
            page = await self.request("GET", path, query={"limit": limit, **({"continue": token} if token else {})})
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    async def list_all(self, path: str) -> list[JSON]:
        return [item async for page in self.pages(path) for item in page.get("items") or []]

    async def list_claims(self) -> list[JSON]:
        """Every claim in the cluster, read afresh: a race check must not trust any cache."""
        return await self.list_all("/apis/resource.k8s.io/v1/resourceclaims")

    async def evict(self, namespace: str, name: str, uid: str) -> JSON:
        """The Eviction API: PodDisruptionBudgets are honoured (a refusal is `Throttled`), and the pod gets a DisruptionTarget condition."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        return await self.create(pod_path(namespace, name, "eviction"), body)

    async def event(self, obj: JSON, *, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on `obj`, as `kubectl describe` shows them; best effort."""
        meta = obj["metadata"]
        body = self._event_body(obj, {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]}, type_, reason, message)
        try:
            await self.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except ApiError as exc:
            logger.warning("event %s on %s %s/%s not recorded: %s", reason, obj["kind"], meta["namespace"], meta["name"], exc)

    async def event_once(self, obj: JSON, *, name: str, type_: str, reason: str, message: str) -> bool:
        """The Event `name` on `obj`, created unless it exists: one per object whatever the restarts and replicas.
        True when this call created it; any refusal but "exists" raises, so the caller can try again."""
        meta = obj["metadata"]
        body = self._event_body(obj, {"name": name, "namespace": meta["namespace"]}, type_, reason, message)
        try:
            await self.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except Conflict:
            return False
        return True

    def _event_body(self, obj: JSON, metadata: JSON, type_: str, reason: str, message: str) -> JSON:
        meta = obj["metadata"]
        now = times.stamp()
        return {
            "metadata": metadata,
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
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    async def apply_webhook_configuration(self, kind: str, body: JSON) -> None:
        """Create the configuration, or patch ours in place (caBundle and URL change across restarts)."""
        path = f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s"
        try:
            await self.create(path, body)
        except Conflict:
            await self.merge_patch(f"{path}/{body['metadata']['name']}", {"webhooks": body["webhooks"]})
