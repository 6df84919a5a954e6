"""Leader election on the real API server: one leader at a time, a silent leader replaced after the lease duration,
a clean shutdown handing over at once, an API server outage outlived, a busy event loop keeping its Lease and a
hung one losing it. And list pages: a list is read in pages that add up to the whole collection."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from conftest import Cluster
from kubernetes_asyncio import client, config

from phalanx.kube.client import Kube
from phalanx.kube.lease import Elector, Timing

TIMING = Timing(lease_duration=3.0, renew_deadline=2.0, retry_period=0.3)


async def _kube(cluster: Cluster) -> Kube:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return Kube(client.ApiClient(configuration))


async def _wait(predicate, timeout: float = 30) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_one_leader_at_a_time_and_a_silent_one_is_replaced(cluster: Cluster, namespace: str) -> None:
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a, b = (Elector(lambda: _kube(cluster), namespace, name, who, TIMING) for who in ("a", "b"))
    both: list[float] = []

    async def lead(elector: Elector) -> None:
        while True:
            if a.leading and b.leading:
                both.append(time.monotonic())
            await asyncio.sleep(0.02)

    tasks = {e.identity: asyncio.create_task(e.run(lambda e=e: lead(e))) for e in (a, b)}
    try:
        assert await _wait(lambda: a.leading or b.leading)
        first, second = (a, b) if a.leading else (b, a)
        await asyncio.sleep(2 * TIMING.lease_duration)
        assert first.leading and not second.leading and first.terms == 1, "the leader keeps renewing, the other waits"
        tasks[first.identity].cancel()  # silent: no release, as after a SIGKILL
        await asyncio.gather(tasks[first.identity], return_exceptions=True)
        silenced = time.monotonic()
        assert await _wait(lambda: second.leading)
        waited = time.monotonic() - silenced
        assert waited >= TIMING.lease_duration - TIMING.renew_deadline, f"took over {waited:.1f}s after the last renewal"
        assert not both, "never two leaders at once"
        lease = json.loads(cluster.kubectl("get", "lease", name, "-n", namespace, "-o", "json").stdout)
        assert lease["spec"]["holderIdentity"] == second.identity and lease["spec"]["leaseTransitions"] == 1
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def test_a_released_lease_is_taken_at_once(cluster: Cluster, namespace: str) -> None:
    name = f"lease-{uuid.uuid4().hex[:6]}"
    slow = Timing(lease_duration=30.0, renew_deadline=20.0, retry_period=0.3)
    a, b = (Elector(lambda: _kube(cluster), namespace, name, who, slow) for who in ("a", "b"))
    run_a = asyncio.create_task(a.run(lambda: asyncio.sleep(3600)))
    try:
        assert await _wait(lambda: a.leading)
        run_b = asyncio.create_task(b.run(lambda: asyncio.sleep(3600)))
        await asyncio.sleep(1)
        assert not b.leading
        run_a.cancel()
        await asyncio.gather(run_a, return_exceptions=True)
        await a.release()
        assert await _wait(lambda: b.leading, timeout=10), "released: the standby need not wait out 30 s"
        run_b.cancel()
        await asyncio.gather(run_b, return_exceptions=True)
    finally:
        run_a.cancel()


async def test_the_elector_outlives_an_api_server_outage(cluster: Cluster, namespace: str) -> None:
    """Renewals refused a connection for longer than the renew deadline: the leader stops leading, keeps
    campaigning, and leads again once the API server answers (its own Lease, taken back at once)."""
    if cluster.local is None:
        pytest.skip("restarts the local control plane's API server")
    elector = Elector(lambda: _kube(cluster), namespace, f"lease-{uuid.uuid4().hex[:6]}", "a", TIMING)
    run = asyncio.create_task(elector.run(lambda: asyncio.sleep(3600)))
    try:
        assert await _wait(lambda: elector.leading)
        await asyncio.to_thread(cluster.local.restart_apiserver, down=2 * TIMING.lease_duration)
        assert not run.done(), f"leader election ended in the outage: {run.exception() if not run.cancelled() else 'cancelled'}"
        # a fresh API server may answer a renewal slower than this test's 2 s deadline: another term is no failure
        assert await _wait(lambda: elector.terms >= 2 and elector.leading, timeout=60), "leads again once the API server answers"
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


def _spin(seconds: float) -> None:
    """CPU-bound work that holds the GIL as the snapshot build does (Python switches threads every interval)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Replica:
    """An elector on an event loop of its own, in a thread: another operator process, as far as the Lease can tell,
    whose own loop stays free while the test's is kept busy or hung."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, identity: str, timing: Timing) -> None:
        self.elector = Elector(lambda: _kube(cluster), namespace, name, identity, timing)
        self.started = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self.thread.start()
        self.started.wait()

    async def _main(self) -> None:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        self.started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.elector.run(lambda: asyncio.sleep(3600))

    def stop(self) -> None:
        assert self.task is not None
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(timeout=30)


class Watcher:
    """Samples who leads every 20 ms from a thread of its own, so it sees the Lease while the test's loop cannot run."""

    def __init__(self, *electors: Elector) -> None:
        self.electors = electors
        self.samples: list[tuple[float, tuple[bool, ...]]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), tuple(e.leading for e in self.electors)))
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()

    def first(self, who: int, since: float = 0.0) -> float | None:
        return next((t for t, leads in self.samples if t >= since and leads[who]), None)


@contextlib.asynccontextmanager
async def _leader_and_standby(
    cluster: Cluster, namespace: str, timing: Timing, lead: Callable[[], Awaitable[None]]
) -> AsyncIterator[tuple[Elector, Replica, Watcher]]:
    """`a` leading on the test's event loop (running `lead`), then `b` standing by on a loop of its own, both watched."""
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a = Elector(lambda: _kube(cluster), namespace, name, "a", timing)
    run = asyncio.create_task(a.run(lead))
    assert await _wait(lambda: a.leading)
    b = Replica(cluster, namespace, name, "b", timing)
    watcher = Watcher(a, b.elector)
    try:
        yield a, b, watcher
    finally:
        watcher.stop()
        b.stop()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_a_leader_whose_loop_is_kept_busy_keeps_its_lease(cluster: Cluster, namespace: str) -> None:
    """The operator's timing (10/7/1 s); the leader's event loop runs CPU-bound chunks of 50 ms in four tasks for three
    renew deadlines, so each turn of the loop takes about 200 ms, as one with the watch decoders and a big snapshot
    build does: it keeps its Lease without a lost term, and the standby never leads. (Renewed on that loop, as before,
    the Lease was lost twice in 25 s of this.)"""
    timing = Timing()
    busy_for = 3 * timing.renew_deadline
    turns: list[float] = []

    async def busy() -> None:
        end = time.monotonic() + busy_for
        while time.monotonic() < end:
            _spin(0.05)
            await asyncio.sleep(0)

    async def probe() -> None:
        end = time.monotonic() + busy_for
        while time.monotonic() < end:
            turns.append(time.monotonic())
            await asyncio.sleep(0)

    async with _leader_and_standby(cluster, namespace, timing, lambda: asyncio.sleep(3600)) as (a, _, watcher):
        await asyncio.gather(probe(), *(busy() for _ in range(4)))
        watcher.stop()
        gaps = [later - earlier for earlier, later in itertools.pairwise(turns)]
        assert statistics.median(gaps) >= 0.15, f"the loop was not kept busy: median turn {statistics.median(gaps):.3f}s"
        held = [leads for _, leads in watcher.samples]
        assert held and all(a_leads and not b_leads for a_leads, b_leads in held), "a led throughout, b never"
        assert a.lost == 0 and a.terms == 1, f"{a.lost} term(s) lost, {a.terms} term(s)"


async def test_a_leader_whose_loop_hangs_loses_its_lease_on_time(cluster: Cluster, namespace: str) -> None:
    """The renewer's thread still runs while the leader's event loop is stuck in CPU-bound work for good (here 4 lease
    durations): it renews only while the loop answers its heartbeat, so the standby takes over, `leading` turns
    False before it does (never two leaders), and the term counts as lost once the loop runs again."""
    hang = 4 * TIMING.lease_duration
    hung: list[float] = []

    async def lead() -> None:
        await asyncio.sleep(0.5)
        hung.append(time.monotonic())
        _spin(hang)
        await asyncio.sleep(3600)

    async with _leader_and_standby(cluster, namespace, TIMING, lead) as (a, b, watcher):
        assert await _wait(lambda: bool(hung) and b.elector.leading, timeout=hang + 60)
        watcher.stop()
        assert not any(all(leads) for _, leads in watcher.samples), "never two leaders at once"
        took_over = watcher.first(1)
        assert took_over is not None and took_over - hung[0] < hang, "the standby took over while the loop was hung"
        assert await _wait(lambda: a.lost == 1), "the hung term counts as lost"
        assert not a.leading


async def test_a_list_is_read_in_pages(cluster: Cluster, namespace: str) -> None:
    kube = await _kube(cluster)
    try:
        for i in range(5):
            await kube.create(f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": f"cm-{i}"}, "data": {"k": "v"}})
        pages = [p async for p in kube.pages(f"/api/v1/namespaces/{namespace}/configmaps", limit=2)]
        names = {i["metadata"]["name"] for p in pages for i in p["items"]} - {"kube-root-ca.crt"}
        assert len(pages) >= 3 and all(len(p["items"]) <= 2 for p in pages)
        assert names == {f"cm-{i}" for i in range(5)}
    finally:
        await kube.api.close()
