"""What the operator checks before it starts: a kubeconfig, an API server that answers, and its CRDs.

Kopf alone would retry forever with a traceback (no kubeconfig), or run with
its webhooks refusing gang Jobs while every watch fails with 404 (no CRDs).
Each check instead stops the process at once with the cause and the fix.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import ConfigException

from phalanx.api.keys import GROUP, VERSION
from phalanx.kube.client import ApiError, Forbidden, Kube

RESOURCES = ("workloads", "podgroups", "compositepodgroups")
CRDS_FIX = "install them with `kubectl apply -k crds/` (or `kubectl apply -k manifests/`, which includes them)"


class PreflightError(Exception):
    """The operator cannot start; the message says why and what to do."""


def kubeconfig_problem(env: Mapping[str, str], home: Path) -> str | None:
    """Why no kubeconfig can be loaded, or None; pure, so the wording is unit-tested."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    if value := env.get("KUBECONFIG"):
        paths = [Path(p) for p in value.split(os.pathsep) if p]
        if not any(p.is_file() for p in paths):
            return f"KUBECONFIG={value} does not exist; export the path `./task up` printed (`phalanx cluster kubeconfig`)"
        return None
    if not (home / ".kube" / "config").is_file():
        return (
            "no kubeconfig: KUBECONFIG is unset and ~/.kube/config does not exist; export KUBECONFIG=<path> "
            "(`./task up` prints it), or run the operator in the cluster (`kubectl apply -k manifests/`)"
        )
    return None


def missing_resources(served: list[str]) -> list[str]:
    return [r for r in RESOURCES if r not in served]


async def api_client(connections: int | None = None) -> client.ApiClient:
    """`connections` caps the client's connection pool (None: the library's default of 100)."""
    configuration = client.Configuration()
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        try:
            await config.load_kube_config(client_configuration=configuration)
        except ConfigException as exc:
            raise PreflightError(f"the kubeconfig cannot be loaded: {exc}") from None
    return environment_read_once(client.ApiClient(configuration))


READ_BUFSIZE = 2**21
"""The library's read buffer (a watch event of a large object exceeds aiohttp's default), kept."""


def environment_read_once(api: client.ApiClient) -> client.ApiClient:
    """`api` with the proxy settings read once, not on every request.

    The library's HTTP session trusts the environment (aiohttp's `trust_env`): every request then looks up
    ~/.netrc and the proxy variables, each in a worker thread, two hops through the thread pool the planner and
    the snapshot builds use. In a burst of 1,000 gangs at 5,000 nodes that was a seventh of the event loop's CPU,
    and each API call waited behind plans for its hops. Here the proxy the environment names for the API server
    (HTTPS_PROXY, HTTP_PROXY and NO_PROXY, as client-go's ProxyFromEnvironment reads them) is taken once, unless
    the kubeconfig names one, and ~/.netrc is not read (client-go reads none: the kubeconfig carries the
    credentials)."""
    rest = api.rest_client
    if not rest.proxy:
        server = urllib.parse.urlsplit(api.configuration.host)
        proxy = urllib.request.getproxies().get(server.scheme)
        if proxy and server.hostname and not urllib.request.proxy_bypass(server.hostname):
            rest.proxy = proxy
    trusting = rest.pool_manager
    connector = trusting.connector
    trusting.detach()  # the connector (its TLS context, its pool) goes on in the new session
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE)
    return api


async def check_cluster(api: client.ApiClient, timeout: float = 15) -> None:
    """The API server answers and serves both CRDs of scheduling.phalanx.dev."""
    server = api.configuration.host
    kube = Kube(api)
    try:
        found = await asyncio.wait_for(kube.get(f"/apis/{GROUP}/{VERSION}"), timeout)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise PreflightError(
            f"the API server at {server} does not answer ({exc or type(exc).__name__}); is the cluster up? (`./task up`)"
        ) from None
    except Forbidden as exc:
        raise PreflightError(f"the API server at {server} refused discovery of {GROUP}/{VERSION}: {exc}") from None
    except ApiError as exc:
        raise PreflightError(f"discovery of {GROUP}/{VERSION} at {server} failed: {exc}") from None
    served = [r["name"] for r in (found or {}).get("resources", [])]
    if missing := missing_resources(served):
        raise PreflightError(f"the CRDs of {GROUP}/{VERSION} are not installed on {server} (missing: {', '.join(missing)}): {CRDS_FIX}")


async def run() -> None:
    """Every check, in order; raises PreflightError with the first problem found."""
    if problem := kubeconfig_problem(os.environ, Path.home()):
        raise PreflightError(problem)
    async with await api_client() as api:
        await check_cluster(api)
