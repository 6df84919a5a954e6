"""The operator's API client (`phalanx.kube.client.Kube`) against the real API server."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import Cluster
from kubernetes_asyncio import client, config

from phalanx.kube import client as kube_client
from phalanx.kube.client import Kube


async def test_a_burst_larger_than_the_pool_waits_its_turn_before_its_timeout_starts(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,048 gate lifts sent at once waited for one of the pool's connections inside their own 30 s, timed out,
    and failed the release twice (the 5,000-node bench). Here: a pool of 2 connections, a 0.5 s timeout and 1,000
    reads at once, which take longer than that in all; each waits for its turn untimed, and every one is answered."""
    monkeypatch.setattr(kube_client, "REQUEST_TIMEOUT", 0.5)
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 2
    async with client.ApiClient(configuration) as api:
        kube = Kube(api)
        started = time.monotonic()
        answers = await asyncio.gather(*(kube.get("/api/v1/namespaces/default") for _ in range(1000)))
        took = time.monotonic() - started
    assert took > kube_client.REQUEST_TIMEOUT, f"the burst took {took:.2f} s: too quick to show that the last ones waited past the timeout"
    assert all(a is not None and a["metadata"]["name"] == "default" for a in answers)
