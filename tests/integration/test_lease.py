"""Leader election on the real API server: one leader at a time, a silent leader replaced after the lease duration,
a clean shutdown handing over at once, an API server outage outlived. And list pages: a list is read in pages that add up to the whole collection."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

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
    kube = await _kube(cluster)
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a, b = (Elector(kube, namespace, name, who, TIMING) for who in ("a", "b"))
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
        await kube.api.close()


async def test_a_released_lease_is_taken_at_once(cluster: Cluster, namespace: str) -> None:
    kube = await _kube(cluster)
    name = f"lease-{uuid.uuid4().hex[:6]}"
    slow = Timing(lease_duration=30.0, renew_deadline=20.0, retry_period=0.3)
    a, b = Elector(kube, namespace, name, "a", slow), Elector(kube, namespace, name, "b", slow)
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
        await kube.api.close()


async def test_the_elector_outlives_an_api_server_outage(cluster: Cluster, namespace: str) -> None:
    """Renewals refused a connection for longer than the renew deadline: the leader stops leading, keeps
    campaigning, and leads again once the API server answers (its own Lease, taken back at once)."""
    if cluster.local is None:
        pytest.skip("restarts the local control plane's API server")
    kube = await _kube(cluster)
    elector = Elector(kube, namespace, f"lease-{uuid.uuid4().hex[:6]}", "a", TIMING)
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
        await kube.api.close()


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
