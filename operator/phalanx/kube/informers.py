"""The operator's view of the cluster: list-then-watch caches that never keep a phantom.

Each `Informer` lists, then watches from the list's resourceVersion. When the
watch ends, errors or expires (410 Gone), it lists again and REPLACES its
store, so an object deleted while no watch was open cannot linger, and one
created meanwhile cannot be missed. Objects are kept as the API server's JSON
(dicts): the planner's snapshot is built from them per cycle.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.api.keys import GROUP, VERSION

logger = logging.getLogger(__name__)

Key = tuple[str, str]


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


class Informer:
    def __init__(self, name: str, list_fn: Callable[..., Awaitable[Any]], on_change: Callable[[], None]) -> None:
        self.name = name
        self._list = list_fn
        self._on_change = on_change
        self.store: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.relists = 0

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                version = await self._relist()
                backoff = 0.5
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status != 410:
                    logger.warning("%s: watch failed (%s), listing again", self.name, exc.status)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 30)
            except Exception:  # a broken connection or a decode error: list again, never give up
                logger.exception("%s: watch broke, listing again", self.name)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)

    async def _relist(self) -> str:
        response = await self._list(_preload_content=False)
        raw = await response.read()
        if response.status != 200:
            raise ApiException(status=response.status, reason=raw.decode(errors="replace")[:200])
        body = json.loads(raw)
        self.store = {key_of(obj): obj for obj in body.get("items", [])}
        self.relists += 1
        self.synced.set()
        self._on_change()
        return body["metadata"]["resourceVersion"]

    async def _watch(self, version: str) -> None:
        async with watch.Watch(return_type="object") as stream:
            async for event in stream.stream(self._list, resource_version=version, timeout_seconds=300, allow_watch_bookmarks=True):
                kind, obj = _event(event)
                if kind == "BOOKMARK" or obj is None:
                    continue
                if kind == "DELETED":
                    self.store.pop(key_of(obj), None)
                else:
                    self.store[key_of(obj)] = obj
                self._on_change()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        return list(self.store.values())


def _event(event: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """kubernetes_asyncio raises ERROR events (410 Gone among them) as ApiException itself."""
    return event.get("type", ""), event.get("raw_object")


class ClusterView:
    """Informers for everything the planner reads; `changed` fires on any change."""

    def __init__(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        resource = client.ResourceV1Api(api)
        scheduling = client.SchedulingV1Api(api)
        custom = client.CustomObjectsApi(api)
        self.changed = asyncio.Event()
        touch = self.changed.set

        def podgroups(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(GROUP, VERSION, "podgroups", **kwargs)

        self.nodes = Informer("nodes", core.list_node, touch)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, touch)
        self.slices = Informer("resourceslices", resource.list_resource_slice, touch)
        self.claims = Informer("resourceclaims", resource.list_resource_claim_for_all_namespaces, touch)
        self.classes = Informer("deviceclasses", resource.list_device_class, touch)
        self.priorities = Informer("priorityclasses", scheduling.list_priority_class, touch)
        self.podgroups = Informer("podgroups", podgroups, touch)
        self.informers = [self.nodes, self.pods, self.slices, self.claims, self.classes, self.priorities, self.podgroups]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in self.informers]
        await asyncio.gather(*(i.synced.wait() for i in self.informers))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
