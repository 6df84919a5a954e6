"""Command line: the operator, its CRDs, the local control plane and the article's demo."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from phalanx.api import crdgen
from phalanx.localcluster import ClusterSpec, LocalCluster, demo, operatorproc
from phalanx.localcluster.cluster import MAX_DRIVER_WORKERS


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phalanx", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    cluster = commands.add_parser("cluster", help="the local control plane (etcd, apiserver, scheduler, kwok nodes)")
    cluster_commands = cluster.add_subparsers(required=True, metavar="ACTION")
    up = cluster_commands.add_parser("up", help="build (once) and start the cluster")
    _add_name(up)
    up.add_argument("--workers", type=int, default=3, help="worker nodes (default 3)")
    up.add_argument("--gpus-per-worker", type=int, default=2, help="GPUs per worker (default 2)")
    up.add_argument(
        "--driver",
        choices=["auto", "dra-example-driver", "fakegpu"],
        default="auto",
        help="who publishes the ResourceSlices: dra-example-driver's kubelet plugin, one process per worker, or the "
        f"Python stand-in; auto picks the driver up to {MAX_DRIVER_WORKERS} workers (default auto)",
    )
    up.add_argument(
        "--upstream-gang",
        action="store_true",
        help="also enable the in-tree gang feature (GenericWorkload, WorkloadWithJob, DRAWorkloadResourceClaims)",
    )
    up.set_defaults(func=_cluster_up)
    down = cluster_commands.add_parser("down", help="stop the cluster and delete its state")
    _add_name(down)
    down.set_defaults(func=_cluster_down)
    kubeconfig = cluster_commands.add_parser("kubeconfig", help="print the admin kubeconfig path")
    _add_name(kubeconfig)
    kubeconfig.set_defaults(func=_cluster_kubeconfig)
    kubectl = cluster_commands.add_parser("kubectl", help="run the matching kubectl against the cluster")
    _add_name(kubectl)
    kubectl.add_argument("args", nargs=argparse.REMAINDER)
    kubectl.set_defaults(func=_cluster_kubectl)

    run = commands.add_parser("run", help="run the operator (webhooks and controllers)")
    run.add_argument(
        "--namespace",
        default=os.environ.get("PHALANX_NAMESPACE", "phalanx-system"),
        help="the operator's namespace (excluded from its webhooks)",
    )
    run.add_argument(
        "--gang-disruption-mode", choices=["all", "single"], default="all", help="disruptionMode of gangs that set none (default all)"
    )
    run.add_argument("--webhook-listen", default="0.0.0.0", help="address the webhook server listens on")
    run.add_argument("--webhook-port", type=int, default=9443)
    endpoint = run.add_mutually_exclusive_group()
    endpoint.add_argument("--webhook-host", help="reach the webhooks at https://HOST:PORT (local control plane)")
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
    run.add_argument("--metrics-port", type=int, default=8000, help="Prometheus metrics port (0: off)")
    run.add_argument(
        "--race-settle", type=float, default=0.2, help="seconds to wait after reserving before the fresh-read check (default 0.2)"
    )
    run.add_argument(
        "--bind-deadline",
        type=float,
        default=60.0,
        help="seconds a released gang has to get minCount members bound before it is torn down and admitted again (default 60)",
    )
    run.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="Kopf liveness endpoint")
    run.set_defaults(func=_run)

    crds = commands.add_parser("crds", help="write the CRD YAML generated from the API models")
    crds.add_argument("--out", type=Path, default=Path("crds"))
    crds.set_defaults(func=_crds)

    run_demo = commands.add_parser("demo", help="run the article's scenarios and print its table")
    run_demo.add_argument("scenario", choices=["deadlock", "all"])
    _add_name(run_demo)
    run_demo.add_argument("--workloads", type=Path, default=Path("e2e/workloads"))
    run_demo.set_defaults(func=_demo)
    return parser


def _run(args: argparse.Namespace) -> int:
    from phalanx import manager

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
            race_settle=args.race_settle,
            bind_deadline=args.bind_deadline,
        )
    )
    return 0


def _lease_timing(args: argparse.Namespace) -> Any:
    from phalanx.kube.lease import Timing

    try:
        return Timing(args.leader_lease_duration, args.leader_renew_deadline, args.leader_retry_period)
    except ValueError as exc:
        raise SystemExit(f"phalanx run: {exc}") from None


def _crds(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in {**crdgen.all_crds(), "kustomization.yaml": crdgen.kustomization()}.items():
        (args.out / name).write_text(crdgen.render(doc))
        print(args.out / name)
    return 0


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=os.environ.get("PHALANX_CLUSTER", "phalanx"), help="cluster name")


def _cluster_up(args: argparse.Namespace) -> int:
    spec = ClusterSpec(
        name=args.name,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        upstream_gang=args.upstream_gang,
        driver=None if args.driver == "auto" else args.driver,
    )
    cluster = LocalCluster(spec)
    cluster.up()
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    LocalCluster(ClusterSpec(name=args.name)).down()
    return 0


def _cluster_kubeconfig(args: argparse.Namespace) -> int:
    print(LocalCluster(ClusterSpec(name=args.name)).kubeconfig)
    return 0


def _cluster_kubectl(args: argparse.Namespace) -> int:
    cluster = LocalCluster(ClusterSpec(name=args.name))
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    env = cluster.env()
    return subprocess.call([env["KWOK_KUBECTL_BINARY"], *rest], env=env)


def _demo(args: argparse.Namespace) -> int:
    cluster = LocalCluster(ClusterSpec(name=args.name))
    if not cluster.exists():
        print(f"cluster {args.name!r} is not up: run ./task up first", file=sys.stderr)
        return 1
    rows = []
    census = demo.run_deadlock(cluster.kubectl, args.workloads)
    rows.append(census.row("no gang policy"))
    print(
        f"no gang policy: {census.pods_running} ranks running, {census.pods_pending} pending; "
        f"{census.jobs_training} of {census.jobs} Jobs have all ranks running"
    )
    if args.scenario == "all":
        demo.clean(cluster.kubectl, "ml-team")
        operator = operatorproc.start(cluster, args.workloads.resolve().parents[1])
        try:
            both, after = demo.run_gang(cluster.kubectl, args.workloads)
        finally:
            operator.stop()
        rows.append(both.row("gang.minCount: 4"))
        rows.append(after.row("gang, train-a deleted"))
        print(
            f"gang.minCount 4: {both.pods_running} ranks running, {both.pods_pending} held whole by Phalanx; "
            f"after deleting train-a, {after.pods_running} of train-b's ranks run"
        )
    print()
    print(demo.format_table(rows))
    return 0
