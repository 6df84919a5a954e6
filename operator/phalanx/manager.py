"""The operator process: Kopf with Phalanx's handlers, its webhook server and configurations."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import kopf
import prometheus_client
from kubernetes_asyncio import client

from phalanx import memorylimit
from phalanx.api.intent import Mode
from phalanx.jobs import controller, webhooks
from phalanx.jobsets import controller as jobset_controller
from phalanx.jobsets import webhooks as jobset_webhooks
from phalanx.kinds import HOOKS, KINDS
from phalanx.kube import lease, preflight, servingcert
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.kube.readiness import Readiness
from phalanx.kube.webhookserver import WebhookServer
from phalanx.leaderworkersets import controller as lws_controller
from phalanx.leaderworkersets import webhooks as lws_webhooks
from phalanx.owners import gating, webhook_config
from phalanx.podgroups import webhooks as pod_group_webhooks
from phalanx.scheduling import assumed
from phalanx.scheduling.loop import SchedulingLoop

__all__ = [
    "controller",
    "jobset_controller",
    "jobset_webhooks",
    "lws_controller",
    "lws_webhooks",
    "memorylimit",
    "pod_group_webhooks",
    "webhooks",
]  # imported for their Kopf handlers and metrics, registered on import

PLANNER_GIL_TURN = 0.0005
"""Seconds a thread may hold the GIL before another is let in (Python's default is 0.005)."""

logger = logging.getLogger(__name__)

NEVER = 10.0**9

REQUEST_CONNECTIONS = 16
"""Connections the request client keeps open to the API server (the library's default is 100). A release writes one
object per member at once, and each write beyond the open connections pays a TLS handshake on both ends: 32 writes
took 88 ms through 32 new connections, 63 ms through 16 new ones and 36 ms through 16 reused ones
(`./task bench:connections`). Watches have a client of their own, so they never hold these."""

OWNER_CONNECTIONS = 8
"""The owners' controllers (a gang Job's Workload and PodGroup) have a client of their own: at a burst of 1,000
Jobs their reconciles were a thousand requests waiting for the request client's 16 connections, and each write of
a release waited behind them (the first release of the 5,000-node burst: record 6.6 s, reserve 10.3 s, on an API
server answering in 30-80 ms), while no gang could be planned before its PodGroup was made."""

LEASE_CONNECTIONS = 2
"""The Lease's client sends one request at a time; a second connection spares it a handshake after a broken one."""


@dataclass(frozen=True)
class OperatorConfig:
    namespace: str = "phalanx-system"
    gang_disruption_mode: Mode = "all"
    webhook_listen: str = "0.0.0.0"
    webhook_port: int = 9443
    liveness: str = "http://0.0.0.0:8080/healthz"
    webhook_url_host: str | None = None
    webhook_url_port: int | None = None
    webhook_service: str | None = None
    tls_dir: Path | None = None
    job_scheduling_dropped: bool | None = None
    race_settle: float = 0.2
    bind_deadline: float = 60.0
    ready_deadline: float = 0.0
    ready_backoff: float = 60.0
    ready_backoff_max: float = 3600.0
    hold_after: float = 300.0
    release_concurrency: int = assumed.CONCURRENCY
    metrics_port: int | None = 8000
    metrics_listen: str = "0.0.0.0"
    readiness: str | None = "http://0.0.0.0:8081/readyz"
    tls_secret: str = "phalanx-webhook-tls"
    lease_name: str = "phalanx-leader"
    lease_timing: lease.Timing = field(default_factory=lease.Timing)
    identity: str = ""

    def endpoint(self) -> webhook_config.Endpoint:
        if self.webhook_service:
            return webhook_config.Endpoint(service_namespace=self.namespace, service_name=self.webhook_service)
        port = self.webhook_url_port or self.webhook_port
        return webhook_config.Endpoint(url=f"https://{self.webhook_url_host or '127.0.0.1'}:{port}")

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
    api = await preflight.api_client(REQUEST_CONNECTIONS)
    memo.kube = Kube(api)
    memo.owners = Kube(await preflight.api_client(OWNER_CONNECTIONS))
    dropped = await _job_scheduling_dropped(api)
    memo.config = cfg = OperatorConfig(**{**cfg.__dict__, "job_scheduling_dropped": dropped})
    memo.webhooks = None if cfg.webhook_service else webhook_config.SelfManaged(memo.kube)

    async def publish(ca_bundle: bytes) -> None:
        """A new CA bundle reaches the webhook configurations before a certificate it signs is served."""
        if memo.webhooks is None:
            await webhook_config.publish(memo.kube, cfg.endpoint(), ca_bundle, cfg.namespace, HOOKS)
        else:
            await memo.webhooks.update(webhook_config.configurations(cfg.endpoint(), ca_bundle, cfg.namespace, HOOKS))

    # the serving key written where the webhook server reads it, removed on exit (`_cleanup`)
    memo.tls_tmp = None if cfg.tls_dir else Path(tempfile.mkdtemp(prefix="phalanx-tls-"))
    source: servingcert.Source = (
        servingcert.DirectorySource(cfg.tls_dir)
        if cfg.tls_dir
        else servingcert.SecretSource(memo.kube, cfg.namespace, cfg.tls_secret, cfg.cert_hosts(), memo.tls_tmp, publish)
    )
    memo.certs = servingcert.Keeper(source, publish)
    cert = await memo.certs.load()
    memo.cert_task = asyncio.create_task(memo.certs.run(), name="webhook-certificate")
    settings.admission.server = WebhookServer(
        on_serving=memo.webhooks.publish if memo.webhooks is not None else None,
        addr=cfg.webhook_listen,
        port=cfg.webhook_port,
        context=memo.certs.context,
        certfile=str(cert.cert_file),
        pkeyfile=str(cert.key_file),
        file_check_interval=NEVER,  # the Keeper reloads the live context in place; Kopf would close the port to restart
    )
    if cfg.metrics_port:
        prometheus_client.start_http_server(cfg.metrics_port, addr=cfg.metrics_listen)
    memo.watches = await preflight.api_client()
    memo.view = ClusterView(memo.kube, memo.watches)
    memo.lifted = gating.Lifted(memo.view)
    await memo.view.start()
    memo.elector = lease.Elector(_lease_client, cfg.namespace, cfg.lease_name, cfg.identity, cfg.lease_timing)
    memo.loop_task = asyncio.create_task(memo.elector.run(lambda: _lead(memo, logger)), name="leader-election")
    memo.loop_task.add_done_callback(_stop_unless_cancelled)
    if cfg.readiness:
        memo.readiness = Readiness(cfg.readiness, (cfg.webhook_listen, cfg.webhook_port), memo.view.synced)
        await memo.readiness.start()
    logger.info(
        f"webhooks at {cfg.endpoint().url or cfg.webhook_service}; spec.scheduling "
        f"{'is dropped by this API server' if dropped else 'may be kept by this API server'}"
    )


async def _lease_client() -> Kube:
    """The Lease's own client, made in its renewer's thread: its requests never wait behind the loop's."""
    return Kube(await preflight.api_client(LEASE_CONNECTIONS))


def _stop_unless_cancelled(election: asyncio.Task[None]) -> None:
    """Leader election ends only when cancelled. Ended any other way, this replica would never schedule again while
    its webhooks kept it looking healthy, and a reservation it left half done would wait for good: it stops instead
    (SIGTERM: Kopf's clean shutdown), so it is restarted and its next term finishes or undoes that reservation."""
    if election.cancelled():
        return
    logger.critical("leader election ended; stopping so that the operator is restarted", exc_info=election.exception())
    os.kill(os.getpid(), signal.SIGTERM)


async def _lead(memo: kopf.Memo, logger: Any) -> None:
    """What only the leader does, until the Lease may be lost: the scheduling loop (a release the last leader left
    half-done is resumed on its first cycle) and, beside it, one resync of every gang Job, and PodsGated lifted on
    each group the watch shows released (`gating.Lifted`)."""
    cfg: OperatorConfig = memo.config
    loop = SchedulingLoop(
        memo.kube,
        memo.view,
        KINDS,
        settle=cfg.race_settle,
        bind_deadline=cfg.bind_deadline,
        ready_deadline=cfg.ready_deadline,
        ready_backoff=(cfg.ready_backoff, cfg.ready_backoff_max),
        hold_after=cfg.hold_after,
        release_concurrency=cfg.release_concurrency,
    )
    loop.leading = lambda: memo.elector.leading

    async def resync() -> None:
        jobs = await controller.resync(memo.owners, logger)
        jobsets = await jobset_controller.resync(memo.owners, logger)
        lwss = await lws_controller.resync(memo.owners, logger)
        logger.info(f"leading: {jobs} gang Job(s), {jobsets} gang JobSet(s), {lwss} gang LeaderWorkerSet(s) reconciled")

    await asyncio.gather(loop.run(), resync(), memo.lifted.run(memo.owners))


@kopf.on.cleanup()
async def _cleanup(memo: kopf.Memo, **_: Any) -> None:
    for name in ("loop_task", "cert_task"):
        task = getattr(memo, name, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    elector = getattr(memo, "elector", None)
    if elector is not None:
        await elector.release()
    readiness = getattr(memo, "readiness", None)
    if readiness is not None:
        await readiness.stop()
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
    for name in ("kube", "owners"):
        kube = getattr(memo, name, None)
        if kube is not None:
            await kube.api.close()
    tls_tmp = getattr(memo, "tls_tmp", None)
    if tls_tmp is not None:  # a private key: not left in the temp dir by every start
        shutil.rmtree(tls_tmp, ignore_errors=True)
    watches = getattr(memo, "watches", None)
    if watches is not None:
        await watches.close()


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
    # The planner runs in a worker thread and is pure Python: by default it may keep the GIL 5 ms at a time, and
    # the event loop (webhooks, probes, watches) waits that long at every wake-up. A shorter turn bounds the wait.
    sys.setswitchinterval(PLANNER_GIL_TURN)
    asyncio.run(preflight.run())
    # Kopf would otherwise name itself from the user name, which a non-root uid without a passwd entry (the image's
    # 65532, as in distroless images) does not have: getpwuid() raises and the operator never starts.
    cfg = replace(cfg, identity=cfg.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    kopf.run(clusterwide=True, standalone=True, memo=kopf.Memo(config=cfg), liveness_endpoint=cfg.liveness, identity=cfg.identity)
