"""The operator process: Kopf with Phalanx's handlers, its webhook server and configurations."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import prometheus_client
from kubernetes_asyncio import client

from phalanx import preflight
from phalanx.api.intent import Mode
from phalanx.jobs import controller, webhook_config, webhooks
from phalanx.kube import tls
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.scheduling.loop import SchedulingLoop

__all__ = ["controller", "webhooks"]  # imported for their Kopf handlers, registered on import
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorConfig:
    namespace: str = "phalanx-system"
    gang_disruption_mode: Mode = "all"
    webhook_listen: str = "0.0.0.0"
    webhook_port: int = 9443
    liveness: str = "http://0.0.0.0:8080/healthz"
    webhook_url_host: str | None = None
    webhook_service: str | None = None
    tls_dir: Path | None = None
    job_scheduling_dropped: bool | None = None
    race_settle: float = 0.2
    bind_deadline: float = 60.0
    metrics_port: int | None = 8000

    def endpoint(self) -> webhook_config.Endpoint:
        if self.webhook_service:
            return webhook_config.Endpoint(service_namespace=self.namespace, service_name=self.webhook_service)
        return webhook_config.Endpoint(url=f"https://{self.webhook_url_host or '127.0.0.1'}:{self.webhook_port}")

    def cert_hosts(self) -> list[str]:
        if self.webhook_service:
            svc = f"{self.webhook_service}.{self.namespace}"
            return [f"{svc}.svc", svc, f"{svc}.svc.cluster.local"]
        return [self.webhook_url_host or "127.0.0.1", "localhost"]


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    cfg: OperatorConfig = memo.config
    settings.peering.standalone = True
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    api = await preflight.api_client()
    memo.kube = Kube(api)
    dropped = await _job_scheduling_dropped(api)
    memo.config = cfg = OperatorConfig(**{**cfg.__dict__, "job_scheduling_dropped": dropped})
    cert = tls.load(cfg.tls_dir) if cfg.tls_dir else tls.generate(Path(tempfile.mkdtemp(prefix="phalanx-tls-")), cfg.cert_hosts())
    bodies = webhook_config.configurations(cfg.endpoint(), cert.ca_pem, cfg.namespace)
    on_serving = None
    if cfg.webhook_service:
        await webhook_config.publish(memo.kube, cfg.endpoint(), cert.ca_pem, cfg.namespace)
    else:
        memo.webhooks = webhook_config.SelfManaged(memo.kube, bodies)
        on_serving = memo.webhooks.publish
    settings.admission.server = _PublishingServer(
        on_serving=on_serving, addr=cfg.webhook_listen, port=cfg.webhook_port, certfile=str(cert.cert_file), pkeyfile=str(cert.key_file)
    )
    if cfg.metrics_port:
        prometheus_client.start_http_server(cfg.metrics_port)
    memo.view = ClusterView(memo.kube)
    await memo.view.start()
    memo.loop = SchedulingLoop(memo.kube, memo.view, settle=cfg.race_settle, bind_deadline=cfg.bind_deadline)
    memo.loop_task = asyncio.create_task(memo.loop.run(), name="scheduling-loop")
    logger.info(
        f"webhooks at {cfg.endpoint().url or cfg.webhook_service}; spec.scheduling "
        f"{'is dropped by this API server' if dropped else 'may be kept by this API server'}"
    )


class _PublishingServer(kopf.WebhookServer):
    """Kopf's webhook server that calls `on_serving` each time it starts listening, before anything is routed to it."""

    def __init__(self, *, on_serving: Callable[[], Awaitable[None]] | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_serving = on_serving

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in super().__call__(fn):
            if self._on_serving is not None:
                await self._on_serving()
                logger.info("webhook server listening; webhook configurations %s written", webhook_config.CONFIGURATION_NAME)
            yield client_config


@kopf.on.cleanup()
async def _cleanup(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "loop_task", None)
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    view = getattr(memo, "view", None)
    if view is not None:
        await view.stop()
    webhooks = getattr(memo, "webhooks", None)
    if webhooks is not None and webhooks.published:
        await webhooks.withdraw()
        logger.info(
            "webhook configurations %s deleted: gang Jobs are admitted ungated until an operator runs again",
            webhook_config.CONFIGURATION_NAME,
        )
    kube = getattr(memo, "kube", None)
    if kube is not None:
        await kube.api.close()


async def _job_scheduling_dropped(api: client.ApiClient) -> bool | None:
    """WorkloadWithJob needs GenericWorkload, which serves scheduling.k8s.io/v1beta1.

    Without it the field is certainly dropped; with it, discovery cannot tell
    whether WorkloadWithJob itself is on.
    """
    groups = (await client.ApisApi(api).get_api_versions()).groups
    served = {v.version for g in groups if g.name == "scheduling.k8s.io" for v in g.versions}
    return None if "v1beta1" in served else True


def run(cfg: OperatorConfig) -> None:
    """Check the kubeconfig, the API server and the CRDs (PreflightError says what is wrong), then run Kopf until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(preflight.run())
    kopf.run(clusterwide=True, standalone=True, memo=kopf.Memo(config=cfg), liveness_endpoint=cfg.liveness)
