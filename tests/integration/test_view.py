"""The cluster view against the real API server: a relist replaces the store, and an expired watch recovers."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from conftest import Cluster
from phalanx.view import Informer


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
        informer = Informer("configmaps", lambda **kw: core.list_namespaced_config_map(namespace, **kw), lambda: None)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("before"))
        await informer._relist()
        assert (namespace, "before") in informer.store
        cluster.kubectl("delete", "configmap", "before", "-n", namespace)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("after"))
        await informer._relist()  # what a 410 Gone leads to: nothing from before may survive
        names = {name for ns, name in informer.store if ns == namespace}
        assert "before" not in names and "after" in names


async def test_an_expired_watch_is_reported_and_the_informer_recovers(cluster: Cluster, namespace: str) -> None:
    async with await _api(cluster) as api:
        core = client.CoreV1Api(api)
        informer = Informer("configmaps", lambda **kw: core.list_namespaced_config_map(namespace, **kw), lambda: None)
        with pytest.raises(ApiException) as expired:
            await informer._watch("1")  # far older than the API server's watch cache: 410 Gone
        assert expired.value.status == 410
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 10)
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_config_map("late"))
            for _ in range(100):
                if (namespace, "late") in informer.store:
                    break
                await asyncio.sleep(0.1)
            assert (namespace, "late") in informer.store, "the watch delivers after recovery"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
