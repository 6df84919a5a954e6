"""The operator's view of the cluster: list-then-watch caches that never keep a phantom.

Each `Informer` lists, then watches from the list's resourceVersion. When the
watch ends or breaks (its timeout, a lost connection, an API server restart),
it watches again from the last resourceVersion it saw, so no change in
between is missed. When that version has expired (410 Gone: etcd compacted
it), it lists again and REPLACES its store, so an object deleted while no
watch was open cannot linger, and one created meanwhile cannot be missed.
Objects are kept as the API server's JSON (dicts), trimmed to what the
operator reads (`trim`): managedFields and last-applied annotations go from
every object, a pod keeps only what scheduling reads. Lists are read in
pages, so neither the answer nor the store ever holds a whole collection of
untrimmed objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Protocol, TypeVar

import orjson
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.api.keys import GROUP, VERSION
from phalanx.kube import trim
from phalanx.kube.client import ApiError, Kube
from phalanx.scheduling import metrics
from phalanx.scheduling.composites import Groups

logger = logging.getLogger(__name__)

Key = tuple[str, str]

WATCH_SECONDS = 300
TYPE_FIELDS = frozenset({"kind", "apiVersion"})


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


class Listener(Protocol):
    """Kept as a store changes, told of every write: an `Index`, or what a reader derives from every object of the
    store and keeps up to date one object at a time (`scheduling.cache.ClaimsTally`)."""

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """One object written (`before` None: created) or deleted (`after` None)."""

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        """After a list replaced the store: everything known before is forgotten."""


L = TypeVar("L", bound=Listener)


class Index:
    """A store's objects by keys derived from each (client-go's Indexer), kept as the store changes: a reader looks
    up one key's objects instead of walking the store every cycle, and a key's `version` moves with every write to
    its objects (a heartbeat's too), so what a reader derives from one key's objects is derived again only then."""

    def __init__(self, keys: Callable[[dict[str, Any]], Iterable[Hashable]]) -> None:
        self._keys = keys
        self._buckets: dict[Hashable, dict[Key, dict[str, Any]]] = {}
        self._versions: dict[Hashable, int] = {}
        self._writes = 0

    def get(self, key: Hashable) -> list[dict[str, Any]]:
        bucket = self._buckets.get(key)
        return list(bucket.values()) if bucket else []

    @property
    def writes(self) -> int:
        """Moves with every write to an object under some key: equal, every key holds what it held."""
        return self._writes

    def version(self, key: Hashable) -> int:
        """Equal versions, equal objects under the key (an emptied key is as one never filled: 0)."""
        return self._versions.get(key, 0)

    def __contains__(self, key: object) -> bool:
        return key in self._buckets

    def put(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """One object written (`before` None: created) or deleted (`after` None)."""
        obj = after if after is not None else before
        if obj is None:
            return
        key = key_of(obj)
        old = set(self._keys(before)) if before is not None else set()
        new = set(self._keys(after)) if after is not None else set()
        if not old and not new:
            return
        self._writes += 1
        for k in old - new:
            bucket = self._buckets.get(k)
            if bucket is not None:
                bucket.pop(key, None)
                if bucket:
                    self._versions[k] = self._writes
                else:
                    del self._buckets[k], self._versions[k]
        for k in new:
            self._buckets.setdefault(k, {})[key] = after  # type: ignore[assignment]
            self._versions[k] = self._writes

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        """After a list replaced the store: every key is new (its version too), and `writes` moves even when the
        new store puts no object under any key (every key's objects went while no watch was open): the rebuild is
        itself a write to every key it empties."""
        self._writes += 1
        self._buckets.clear()
        self._versions.clear()
        for obj in store.values():
            self.put(None, obj)


class Informer:
    """One resource: lists through `kube` at `path`, watches through the generated client's `watch_fn`."""

    def __init__(
        self,
        name: str,
        kube: Kube,
        path: str,
        watch_fn: Callable[..., Awaitable[Any]],
        on_change: Callable[[], None],
        keep: Callable[[dict[str, Any]], dict[str, Any]] = trim.common,
        *,
        optional: bool = False,
        on_gone: Callable[[dict[str, Any]], None] | None = None,
        on_write: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
    ) -> None:
        self.name = name
        self._on_gone = on_gone
        """Told of each object that went, as last seen: deleted on the watch, or missing from a list after a gap."""
        self._on_write = on_write
        """Told of each object written as (before, after), by the watch or by a relist after a gap; not by the first list."""
        self._keep = keep
        self.optional = optional
        """A resource the server may not serve (404): then it is synced and empty, and asked for again now and then."""
        self._kube = kube
        self._path = path
        self._watch_fn = watch_fn
        self._on_change = on_change
        self.store: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        self.revision = 0
        """Counts changes to the store: what is built from it need not be rebuilt while it stays."""
        self.unread = 0
        """Counts writes the watch delivered that changed nothing kept: neither the revision nor the loop moved."""
        self.version: str | None = None
        """The last resourceVersion seen (list or event): a watch that breaks resumes from it."""
        self._tick = asyncio.Event()
        self.indexes: dict[str, Listener] = {}
        """Indexes and other listeners, by name, told of every write to the store."""
        self._counted = metrics.CHANGES.labels(resource=name)

    def index(self, name: str, keys: Callable[[dict[str, Any]], Iterable[Hashable]]) -> Index:
        """The index `name` of this store (made, from what the store holds now, on first asking)."""
        return self.listen(name, lambda: Index(keys))

    def listen(self, name: str, make: Callable[[], L]) -> L:
        """The listener `name` of this store, made on first asking and told of what the store holds now."""
        found = self.indexes.get(name)
        if found is None:
            found = self.indexes[name] = make()
            found.rebuild(self.store)
        return found  # type: ignore[return-value]

    def _changed(self) -> None:
        self.revision += 1
        self._counted.inc()
        self._wake_waiters()
        self._on_change()

    def _unread(self) -> None:
        """A write that changed nothing kept (a heartbeat): the store has its new resourceVersion, for conditional
        writes and for waiters, but what is built from the store stands, and the loop is not woken for it."""
        self.unread += 1
        metrics.UNREAD_CHANGES.labels(resource=self.name).inc()
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wake on each change this informer sees until `predicate` holds; False when `timeout` passes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._tick.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                if self.version is None:
                    self.version = await self._relist()
                await self._watch()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except (ApiException, ApiError) as exc:
                if exc.status == 404 and self.optional:
                    served = bool(self.store)
                    self.store = {}
                    for index in self.indexes.values():
                        index.rebuild(self.store)
                    self.version = None
                    self.synced.set()
                    if served:  # served before, gone now: what was built from its objects goes, and the loop wakes for it
                        self._changed()
                    await asyncio.sleep(60)
                    continue
                if exc.status == 410:
                    logger.info("%s: watch expired (410 Gone at resourceVersion %s), listing again", self.name, self.version)
                    metrics.RELISTS.labels(resource=self.name, reason="expired").inc()
                    self.version = None
                    continue
                logger.warning("%s: watch failed (%s), watching again from %s", self.name, exc.status, self.version)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
            except Exception:  # a broken connection or a decode error: watch again, never give up
                logger.exception("%s: watch broke, watching again from %s", self.name, self.version)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)

    async def _relist(self) -> str:
        store: dict[Key, dict[str, Any]] = {}
        version = ""
        async for page in self._kube.pages(self._path):
            for obj in page.get("items") or []:
                store[key_of(obj)] = self._keep(obj)
            version = page["metadata"]["resourceVersion"]
        if self._on_gone is not None:
            for key, obj in self.store.items():
                if key not in store:
                    self._on_gone(obj)
        if self._on_write is not None and self.relists:
            for key, obj in store.items():
                if self.store.get(key) != obj:
                    self._on_write(self.store.get(key), obj)
        self.store = store
        for index in self.indexes.values():
            index.rebuild(store)
        self.relists += 1
        self.synced.set()
        self._changed()
        return version

    async def _watch(self) -> None:
        """Apply events from `self.version` until the stream ends, advancing it, so a break resumes where it left off."""
        async with RawWatch() as stream:
            # the server ends a watch after `timeout_seconds`; the client deadline a little later ends a half-open one
            events = stream.stream(
                self._watch_fn,
                resource_version=self.version,
                timeout_seconds=WATCH_SECONDS,
                allow_watch_bookmarks=True,
                _request_timeout=WATCH_SECONDS + 30,
            )
            async for event in events:
                kind, obj = _event(event)
                if obj is None:
                    continue
                self.apply(kind, obj)
                self.version = obj["metadata"].get("resourceVersion") or self.version

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED, BOOKMARK) to the store, its indexes and whoever listens."""
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            gone = self.store.pop(key_of(obj), None)
            for index in self.indexes.values():
                index.put(gone, None)
            if self._on_gone is not None:
                self._on_gone(self._keep(obj))
            self._changed()
            return
        kept = self._keep(obj)
        before = self.store.get(key_of(obj))
        if self._on_write is not None:
            self._on_write(before, kept)
        self.store[key_of(obj)] = kept
        for index in self.indexes.values():
            index.put(before, kept)
        if before is not None and unread_change(before, kept):
            self._unread()
        else:
            self._changed()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get((namespace, name))

    @property
    def written(self) -> tuple[int, int, int]:
        """Moves with every write to the store, a heartbeat's too: equal, the same objects at the same versions."""
        return (self.relists, self.revision, self.unread)

    def items(self) -> list[dict[str, Any]]:
        return list(self.store.values())


def unread_change(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """True when two kept versions of an object differ in nothing but their resourceVersion: a write to fields
    the trim drops (a node's heartbeat), which no reader can see. The type fields are not the object's state: a
    list's items come without them, a watch event's object with them."""
    fields = (before.keys() | after.keys()) - TYPE_FIELDS
    for field in fields:
        if field != "metadata":
            if before.get(field) != after.get(field):
                return False
        elif {**before.get(field, {}), "resourceVersion": None} != {**after.get(field, {}), "resourceVersion": None}:
            return False
    return True


class RawWatch(watch.Watch):
    """The library's watch, each event's object left as the JSON the API server sent. Asked for any return type, even
    "object", the library writes every event's object back to JSON and parses it again: two of an event's three JSON
    passes, 40% of the informers' time on the event loop in a profile of the 5,000-node burst."""

    def get_return_type(self, func: object) -> None:  # type: ignore[override]
        return None

    def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
        """An object's event parsed by orjson (the standard library's parser was the largest single cost of the
        informers in the 5,000-node burst's profile); an ERROR or a BOOKMARK, rare, goes the library's way (parsed
        again there), which raises the one and resumes from the other."""
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        if (
            response_type is not None
            or not isinstance(event, dict)
            or event.get("type") not in _OBJECT_EVENTS
            or not isinstance(event.get("object"), dict)
        ):
            return super().unmarshal_event(data, response_type)
        event["raw_object"] = obj = event["object"]
        self.resource_version = (obj.get("metadata") or {}).get("resourceVersion", self.resource_version)
        return event


_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


def _event(event: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """kubernetes_asyncio raises ERROR events (410 Gone among them) as ApiException itself."""
    return event.get("type", ""), event.get("raw_object")


class Finished:
    """The uids of pods last seen Succeeded before they went (PodGC, a cleanup, a Job's successPolicy), newest kept.

    Succeeded is final, so a pod seen so finished, whenever it was removed. A pod removed while no replica watched
    is not known here: the Job's own state is the fallback (a finished Job loses nothing)."""

    def __init__(self, keep: int = 100_000) -> None:
        self._keep = keep
        self._uids: dict[str, None] = {}

    def note(self, pod: dict[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            self._uids[pod["metadata"]["uid"]] = None
            if len(self._uids) > self._keep:
                del self._uids[next(iter(self._uids))]

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids


class AllocationOrder:
    """The order in which claims were allocated, by the resourceVersion of the write that allocated each, as the
    claims watch delivered it (in resourceVersion order).

    Timestamps cannot tell: managedFields and allocationTimestamp have one-second resolution, and a manager's
    managedFields time moves on with its every later write to the claim. A claim already allocated when the operator
    first listed them has no recorded order: it was allocated before any claim this records. A claim allocated
    during a watch gap gets the resourceVersion the relist showed, later than any recorded before the gap."""

    def __init__(self) -> None:
        self._at: dict[str, int] = {}

    def note(self, before: dict[str, Any] | None, after: dict[str, Any]) -> None:
        uid = after["metadata"]["uid"]
        if not (after.get("status") or {}).get("allocation"):
            self._at.pop(uid, None)
            return
        if before is not None and before["metadata"]["uid"] == uid and (before.get("status") or {}).get("allocation"):
            return  # allocated already: a later write (reservedFor, a finalizer) is no allocation
        with contextlib.suppress(ValueError):
            self._at[uid] = int(after["metadata"]["resourceVersion"])

    def forget(self, claim: dict[str, Any]) -> None:
        self._at.pop(claim["metadata"]["uid"], None)

    def get(self, uid: str) -> int | None:
        return self._at.get(uid)


class ClusterView:
    """Informers for everything the planner reads; `changed` fires on any change."""

    def __init__(self, kube: Kube, watches: client.ApiClient | None = None) -> None:
        """Lists go through `kube`; watches, which each hold a connection for minutes, through `watches` (default
        `kube`'s client), so they never take the connections requests need."""
        api = watches or kube.api
        core = client.CoreV1Api(api)
        resource = client.ResourceV1Api(api)
        scheduling = client.SchedulingV1Api(api)
        custom = client.CustomObjectsApi(api)
        self.changed = asyncio.Event()
        self.finished = Finished()
        """Pods that Succeeded before they went: a member that finished its work and was removed is not lost."""
        self.allocations = AllocationOrder()
        """Which claim was allocated first, where two hold one device."""
        self.revision = 0
        """Moves on with every change any informer sees: equal revisions, equal view."""
        self.changed_since = time.monotonic()
        """When the oldest change not yet taken by a cycle arrived: how long a change waits for the loop."""

        def touch() -> None:
            self.revision += 1
            if not self.changed.is_set():
                self.changed_since = time.monotonic()
            self.changed.set()

        def podgroups(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(GROUP, VERSION, "podgroups", **kwargs)

        def composites(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object(GROUP, VERSION, "compositepodgroups", **kwargs)

        def informer(
            name: str,
            path: str,
            watch_fn: Callable[..., Awaitable[Any]],
            keep: Callable[[dict[str, Any]], dict[str, Any]] = trim.common,
            optional: bool = False,
            on_gone: Callable[[dict[str, Any]], None] | None = None,
            on_write: Callable[[dict[str, Any] | None, dict[str, Any]], None] | None = None,
        ) -> Informer:
            return Informer(name, kube, path, watch_fn, touch, keep, optional=optional, on_gone=on_gone, on_write=on_write)

        def taint_rules(**kwargs: Any) -> Awaitable[Any]:
            return custom.list_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", **kwargs)

        self.nodes = informer("nodes", "/api/v1/nodes", core.list_node, trim.node)
        self.pods = informer("pods", "/api/v1/pods", core.list_pod_for_all_namespaces, trim.pod, on_gone=self.finished.note)
        self.slices = informer("resourceslices", "/apis/resource.k8s.io/v1/resourceslices", resource.list_resource_slice)
        self.claims = informer(
            "resourceclaims",
            "/apis/resource.k8s.io/v1/resourceclaims",
            resource.list_resource_claim_for_all_namespaces,
            trim.claim,
            on_gone=self.allocations.forget,
            on_write=self.allocations.note,
        )
        self.classes = informer("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses", resource.list_device_class)
        self.priorities = informer("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses", scheduling.list_priority_class)
        self.podgroups = informer("podgroups", f"/apis/{GROUP}/{VERSION}/podgroups", podgroups)
        self.composites = informer("compositepodgroups", f"/apis/{GROUP}/{VERSION}/compositepodgroups", composites)
        self.groups = Groups(self.podgroups, self.composites)
        """The loop's groups: PodGroups of their own and root gang CompositePodGroups (`scheduling.composites`)."""
        self.budgets = informer(
            "poddisruptionbudgets",
            "/apis/policy/v1/poddisruptionbudgets",
            client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces,
        )
        # DeviceTaintRules taint devices for every allocator (GA in 1.37; a 1.34 server without the gate has none)
        self.taint_rules = informer("devicetaintrules", "/apis/resource.k8s.io/v1/devicetaintrules", taint_rules, optional=True)
        self.informers = [
            self.nodes,
            self.pods,
            self.slices,
            self.claims,
            self.classes,
            self.priorities,
            self.podgroups,
            self.composites,
            self.budgets,
            self.taint_rules,
        ]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in self.informers]
        await asyncio.gather(*(i.synced.wait() for i in self.informers))

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
