"""The cluster view against the real API server: a relist replaces the store, and an expired watch recovers.

Slices: the session cluster's, from dra-example-driver's plugin.
"""

from __future__ import annotations

import asyncio
import datetime
import json

from conftest import Cluster
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from phalanx.kube import trim
from phalanx.kube.client import Kube
from phalanx.kube.informers import Informer


def _config_map(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})


async def _api(cluster: Cluster) -> client.ApiClient:
    from kubernetes_asyncio import config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


async def test_a_relist_drops_what_was_deleted_unseen_and_adds_what_was_created(cluster: Cluster, namespace: str) -> None:
    async with await _api(cluster) as api:
        core = client.CoreV1Api(api)
        informer = Informer(
            "configmaps",
            Kube(api),
            f"/api/v1/namespaces/{namespace}/configmaps",
            lambda **kw: core.list_namespaced_config_map(namespace, **kw),
            lambda: None,
        )
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("before"))
        await informer._relist()
        assert (namespace, "before") in informer.store
        cluster.kubectl("delete", "configmap", "before", "-n", namespace)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("after"))
        await informer._relist()  # what a 410 Gone leads to: nothing from before may survive
        names = {name for ns, name in informer.store if ns == namespace}
        assert "before" not in names and "after" in names


async def test_after_410_gone_the_informer_relists_without_phantoms(cluster: Cluster, namespace: str) -> None:
    """The API server cannot be made to expire a watch on demand here, so the first watch call
    answers 410 Gone itself; everything else is the real server: the object deleted while no
    watch was open must vanish, the one created must appear, and watching must go on."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("doomed"))
    async with await _api(cluster) as api:
        core = client.CoreV1Api(api)
        expired = []

        def watch_fn(**kwargs):
            if not expired:
                expired.append(True)
                cluster.kubectl("delete", "configmap", "doomed", "-n", namespace)
                cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("born"))
                raise ApiException(status=410, reason="Gone: too old resource version")
            return core.list_namespaced_config_map(namespace, **kwargs)

        informer = Informer("configmaps", Kube(api), f"/api/v1/namespaces/{namespace}/configmaps", watch_fn, lambda: None)
        task = asyncio.create_task(informer.run())
        try:
            for _ in range(100):
                names = {name for _, name in informer.store}
                if informer.relists >= 2 and "born" in names:
                    break
                await asyncio.sleep(0.1)
            assert expired and informer.relists >= 2
            assert "doomed" not in names and "born" in names
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("late"))
            for _ in range(100):
                if (namespace, "late") in informer.store:
                    break
                await asyncio.sleep(0.1)
            assert (namespace, "late") in informer.store, "the watch delivers after recovery"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_node_heartbeat_wakes_no_cycle_and_a_new_taint_does(cluster: Cluster) -> None:
    """A heartbeat writes only a node's conditions, which the informer does not keep: the store takes the new
    resourceVersion (conditional writes, waiters), but neither the revision nor the loop moves. With 1,000 nodes
    heartbeating, each write woke a cycle that met every waiting gang (57.6% of a core at rest with 1,000 waiting)."""
    node = "worker-1"
    async with await _api(cluster) as api:
        core = client.CoreV1Api(api)
        wakes: list[int] = []
        informer = Informer("nodes", Kube(api), "/api/v1/nodes", core.list_node, lambda: wakes.append(1), trim.node)
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
            version = informer.get("", node)["metadata"]["resourceVersion"]
            revision, woken, unread = informer.revision, len(wakes), informer.unread
            beat = {"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": _now()}]}}
            cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(beat))
            assert await informer.wait_until(lambda: informer.get("", node)["metadata"]["resourceVersion"] != version, 10)
            assert informer.unread > unread, "the heartbeat reached the informer"
            assert (informer.revision, len(wakes)) == (revision, woken), "a heartbeat moved the view"
            cluster.kubectl("label", "node", node, "phalanx-test/heartbeat=seen")
            assert await informer.wait_until(lambda: informer.revision > revision, 10), "a label is a change"
            assert len(wakes) > woken
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            cluster.kubectl("label", "node", node, "phalanx-test/heartbeat-")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
