"""`phalanx run`: the operator itself (webhooks, controllers, the scheduling loop) with the current kubeconfig."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from phalanx.scheduling import assumed


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("run", help="run the operator (webhooks and controllers) with the current kubeconfig")
    run.add_argument(
        "--namespace",
        default=os.environ.get("PHALANX_NAMESPACE", "phalanx-system"),
        help="the operator's namespace, excluded from its webhooks (default $PHALANX_NAMESPACE or phalanx-system)",
    )
    run.add_argument(
        "--gang-disruption-mode", choices=["all", "single"], default="all", help="disruptionMode of gangs that set none (default all)"
    )
    run.add_argument("--webhook-listen", default="0.0.0.0", help="address the webhook server listens on (default 0.0.0.0)")
    run.add_argument("--webhook-port", type=int, default=9443, help="port the webhook server listens on (default 9443)")
    endpoint = run.add_mutually_exclusive_group()
    endpoint.add_argument(
        "--webhook-host",
        help="reach the webhooks at https://HOST:PORT (local control plane; the configurations are written once the "
        "server serves and deleted on a clean shutdown; default 127.0.0.1)",
    )
    endpoint.add_argument("--webhook-service", help="reach the webhooks through this Service in --namespace (in cluster)")
    run.add_argument(
        "--webhook-advertise-port",
        type=int,
        help="with --webhook-host: the port the API server connects to, when a balancer in front of several replicas "
        "listens on another one than --webhook-port (default: --webhook-port)",
    )
    run.add_argument(
        "--tls-dir",
        type=Path,
        help="tls.crt, tls.key and ca.crt to serve with, re-read when they change; without it every replica serves "
        "the CA and certificate kept in --tls-secret",
    )
    run.add_argument(
        "--tls-secret",
        default="phalanx-webhook-tls",
        help="Secret in --namespace holding the webhook CA and serving certificate: created by the first replica, "
        "renewed before expiry (default phalanx-webhook-tls)",
    )
    run.add_argument(
        "--readiness",
        default="http://0.0.0.0:8081/readyz",
        help="readiness endpoint: 200 once the webhook server serves TLS and the informers have synced ('' turns it off)",
    )
    run.add_argument("--leader-lease", default="phalanx-leader", help="Lease in --namespace the replicas elect their leader on")
    run.add_argument(
        "--leader-identity",
        default=os.environ.get("POD_NAME", ""),
        help="this replica's name in the Lease; unique per replica (default $POD_NAME, else hostname and a random suffix)",
    )
    run.add_argument(
        "--leader-lease-duration",
        type=float,
        default=10.0,
        help="seconds a standby waits after the leader's last renewal before it takes over (default 10)",
    )
    run.add_argument(
        "--leader-renew-deadline",
        type=float,
        default=7.0,
        help="seconds the leader keeps acting without a successful renewal; below the lease duration (default 7)",
    )
    run.add_argument(
        "--leader-retry-period", type=float, default=1.0, help="seconds between renewals and between a standby's attempts (default 1)"
    )
    run.add_argument("--metrics-port", type=int, default=8000, help="Prometheus metrics port (0: off; default 8000)")
    run.add_argument(
        "--metrics-listen", default="0.0.0.0", help="address the metrics server listens on (default 0.0.0.0; the local mode: 127.0.0.1)"
    )
    run.add_argument(
        "--race-settle",
        type=float,
        default=0.2,
        help="seconds to wait after reserving, when some pod may be mid-allocation in kube-scheduler, before the fresh-read check (default 0.2)",
    )
    run.add_argument(
        "--bind-deadline",
        type=float,
        default=60.0,
        help="seconds a released gang has to get minCount members bound before it is torn down and admitted again (default 60)",
    )
    run.add_argument(
        "--ready-deadline",
        type=float,
        default=0.0,
        help="seconds a released gang has to get every member Ready before it is torn down and admitted again after a "
        "back-off; 0 (default): no deadline; a Job's scheduling.phalanx.dev/ready-deadline annotation overrides it",
    )
    run.add_argument(
        "--ready-backoff",
        type=float,
        default=60.0,
        help="seconds before a gang torn down at its ready deadline is admitted again, doubled for each timeout in a row (default 60)",
    )
    run.add_argument("--ready-backoff-max", type=float, default=3600.0, help="the most that back-off grows to, in seconds (default 3600)")
    run.add_argument(
        "--hold-after",
        type=float,
        default=300.0,
        help="seconds a gang waits at the head of the line before the devices its plan needs are held for it as they free "
        "(default 300); 0: never; a Job's scheduling.phalanx.dev/hold-after annotation overrides it",
    )
    run.add_argument(
        "--release-concurrency",
        type=_at_least_one,
        default=assumed.CONCURRENCY,
        help="gang releases written at once while the loop plans the next group, each counted as done by those plans "
        f"(default {assumed.CONCURRENCY}); 1: one release at a time, the loop waiting for each",
    )
    run.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="Kopf liveness endpoint (default http://0.0.0.0:8080/healthz)"
    )
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from phalanx import manager
    from phalanx.kube import preflight

    try:
        manager.run(
            manager.OperatorConfig(
                namespace=args.namespace,
                gang_disruption_mode=args.gang_disruption_mode,
                webhook_listen=args.webhook_listen,
                webhook_port=args.webhook_port,
                webhook_url_host=args.webhook_host,
                webhook_url_port=args.webhook_advertise_port,
                tls_secret=args.tls_secret,
                readiness=args.readiness or None,
                lease_name=args.leader_lease,
                identity=args.leader_identity,
                lease_timing=_lease_timing(args),
                webhook_service=args.webhook_service,
                tls_dir=args.tls_dir,
                liveness=args.liveness,
                metrics_port=args.metrics_port or None,
                metrics_listen=args.metrics_listen,
                race_settle=args.race_settle,
                bind_deadline=args.bind_deadline,
                ready_deadline=args.ready_deadline,
                ready_backoff=args.ready_backoff,
                ready_backoff_max=args.ready_backoff_max,
                hold_after=args.hold_after,
                release_concurrency=args.release_concurrency,
            )
        )
    except preflight.PreflightError as exc:
        print(f"phalanx run: {exc}", file=sys.stderr)
        return 2
    return 0


def _lease_timing(args: argparse.Namespace) -> Any:
    from phalanx.kube.lease import Timing

    try:
        return Timing(args.leader_lease_duration, args.leader_renew_deadline, args.leader_retry_period)
    except ValueError as exc:
        raise SystemExit(f"phalanx run: {exc}") from None


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number
