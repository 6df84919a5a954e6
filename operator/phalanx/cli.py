"""Command line: the operator, its CRDs, the local control plane and the article's demo."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from phalanx import explain, scrape
from phalanx.api import crdgen
from phalanx.localcluster import ClusterSpec, LocalCluster, demo, jobset, operatorproc
from phalanx.localcluster.cluster import MAX_DRIVER_WORKERS

# operator/phalanx/cli.py -> the checkout, which holds crds/ and manifests/ (an editable install, as ./task makes).
DEFAULT_REPO = Path(__file__).resolve().parents[2]
DEFAULT_CLUSTER = "phalanx"
"""The tasks' default too (`CLUSTER` in Taskfile.yml): a hint for it needs no `CLUSTER=`."""


def default_cluster() -> str:
    """$PHALANX_CLUSTER, else `phalanx`: read when the parser is built, so every command agrees on it."""
    return os.environ.get("PHALANX_CLUSTER") or DEFAULT_CLUSTER


def task_hint(command: str, name: str) -> str:
    """`./task COMMAND` as it must be typed for cluster `name`: the tasks pick their cluster from CLUSTER=."""
    return f"`./task {command}`" if name == DEFAULT_CLUSTER else f"`CLUSTER={name} ./task {command}`"


class NotUp(Exception):
    """A command that needs the local cluster found none."""


def main(argv: list[str] | None = None, prog: str = "phalanx") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(_kubectl_passthrough(argv))
    try:
        return args.func(args)
    except NotUp as exc:
        print(f"phalanx: {exc}", file=sys.stderr)
        return 1


def _kubectl_passthrough(argv: list[str]) -> list[str]:
    """`phalanx cluster kubectl -n ml-team get pods` works without `--`: all after `kubectl` (and its own
    `--name X`) is kubectl's, so argparse must not read kubectl's flags as ours."""
    if argv[:2] != ["cluster", "kubectl"]:
        return argv
    rest, ours = argv[2:], []
    if rest[:1] == ["--name"] and len(rest) > 1:
        ours, rest = rest[:2], rest[2:]
    elif rest[:1] and rest[0].startswith("--name="):
        ours, rest = rest[:1], rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return ["cluster", "kubectl", *ours, "--", *rest]


def _parser(prog: str = "phalanx") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    cluster = commands.add_parser("cluster", help="the local control plane (etcd, apiserver, scheduler, kwok nodes) and its operator")
    cluster_commands = cluster.add_subparsers(required=True, metavar="ACTION")
    up = cluster_commands.add_parser("up", help="build (once) and start the cluster, its DRA driver, the CRDs and the operator")
    _add_name(up)
    up.add_argument("--workers", type=int, default=3, help="worker nodes (default 3)")
    up.add_argument("--gpus-per-worker", type=int, default=2, help="GPUs per worker (default 2)")
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="nodes that run containers (kubelet, containerd, runc; root), beside the kwok workers, each with the same GPUs (default 0)",
    )
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
    up.add_argument("--jobset", action="store_true", help="also run JobSet's controller (built from the Go module proxy) with its CRD")
    up.add_argument("--no-operator", action="store_true", help="do not start the operator (the CRDs are not installed either)")
    up.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"checkout holding crds/ and manifests/ (default {DEFAULT_REPO})")
    up.set_defaults(func=_cluster_up)
    install = cluster_commands.add_parser(
        "install",
        help="install the operator as a user does, on the cluster's real nodes: its image built and loaded here, `kubectl apply -k e2e/install`",
    )
    _add_name(install)
    install.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"checkout to build the image from (default {DEFAULT_REPO})")
    install.set_defaults(func=_cluster_install)
    down = cluster_commands.add_parser("down", help="stop the operator, the driver and the cluster, and delete its state")
    _add_name(down)
    down.set_defaults(func=_cluster_down)
    kubeconfig = cluster_commands.add_parser("kubeconfig", help="print the admin kubeconfig path")
    _add_name(kubeconfig)
    kubeconfig.set_defaults(func=_cluster_kubeconfig)
    kubectl = cluster_commands.add_parser(
        "kubectl", help="run the matching kubectl against the cluster (`phalanx cluster kubectl -n ml-team get pods`)"
    )
    _add_name(kubectl)
    kubectl.add_argument("args", nargs=argparse.REMAINDER, help="kubectl's arguments")
    kubectl.set_defaults(func=_cluster_kubectl)
    logs = cluster_commands.add_parser("logs", help="print the log of the operator `cluster up` started")
    _add_name(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing as the operator logs")
    logs.set_defaults(func=_cluster_logs)

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
        "--liveness", default="http://0.0.0.0:8080/healthz", help="Kopf liveness endpoint (default http://0.0.0.0:8080/healthz)"
    )
    run.set_defaults(func=_run)

    crds = commands.add_parser("crds", help="write the CRD YAML generated from the API models")
    crds.add_argument("--out", type=Path, default=Path("crds"), help="directory to write into (default crds)")
    crds.set_defaults(func=_crds)

    explain.add_parser(commands)
    scrape.add_parser(commands, default_cluster())

    run_demo = commands.add_parser("demo", help="run the article's scenarios on the local cluster and print what it shows")
    run_demo.add_argument(
        "scenario",
        choices=["deadlock", "gang", "dra-preempt", "preempt", "all"],
        help="deadlock: no gang policy; gang: gang.minCount 4; dra-preempt: an urgent gang preempts one holding GPUs; "
        "preempt: the same on a node-local extended resource (--mode); all: the whole story and its table",
    )
    _add_name(run_demo)
    run_demo.add_argument("--workloads", type=Path, default=Path("e2e/workloads"), help="the article's manifests (default e2e/workloads)")
    run_demo.add_argument(
        "--mode", choices=["single", "all"], default="single", help="preempt: the research gang's disruptionMode (default single)"
    )
    run_demo.add_argument(
        "--start",
        action="store_true",
        help="all: start the cluster (and operator) when it is not up, and stop it at the end unless --keep",
    )
    run_demo.add_argument("--keep", default="", help="all: with --start, 1 or true leaves the cluster running (KEEP=1)")
    run_demo.add_argument(
        "--no-upstream", action="store_true", help="all: skip the in-tree feature's rows (a second cluster with the 1.37 gates)"
    )
    run_demo.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"checkout holding crds/ and manifests/ (default {DEFAULT_REPO})")
    run_demo.set_defaults(func=_demo)
    return parser


def _run(args: argparse.Namespace) -> int:
    from phalanx import manager, preflight

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


def _crds(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in {**crdgen.all_crds(), "kustomization.yaml": crdgen.kustomization()}.items():
        (args.out / name).write_text(crdgen.render(doc))
        print(args.out / name)
    return 0


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=default_cluster(), help=f"cluster name (default $PHALANX_CLUSTER or {DEFAULT_CLUSTER})")


def clusters_up(but: str) -> list[str]:
    """The other local clusters whose API server answers: what a user who forgot CLUSTER= meant."""
    root = LocalCluster(ClusterSpec(name=but)).cluster_dir.parent
    names = sorted(d.name for d in root.iterdir() if d.is_dir() and d.name != but) if root.is_dir() else []
    return [n for n in names if LocalCluster(ClusterSpec(name=n)).answers()]


def not_up_message(name: str) -> str:
    message = f"cluster {name} is not up: start it with {task_hint('up', name)} (or `phalanx cluster up --name {name}`)"
    others = clusters_up(name)
    if others:
        message += f"; up here: {', '.join(others)} (pick one with `CLUSTER=NAME ./task ...` or `--name NAME`)"
    return message


def _existing(name: str) -> LocalCluster:
    cluster = LocalCluster(ClusterSpec(name=name))
    if not cluster.exists():
        raise NotUp(not_up_message(name))
    return cluster


def _say(message: str) -> None:
    print(f"phalanx: {message}", file=sys.stderr, flush=True)


def _cluster_up(args: argparse.Namespace) -> int:
    spec = ClusterSpec(
        name=args.name,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        real_nodes=args.real_nodes,
        jobset=args.jobset,
        upstream_gang=args.upstream_gang,
        driver=None if args.driver == "auto" else args.driver,
    )
    start_cluster(LocalCluster(spec), operator=not args.no_operator, repo=args.repo)
    return 0


def start_cluster(cluster: LocalCluster, *, operator: bool, repo: Path, export: bool = True) -> bool:
    """Start the cluster unless it is up (saying so), then the operator unless it runs; True when the cluster was started here."""
    name = cluster.spec.name
    started = False
    if cluster.answers():
        _say(f"cluster {name} is already up; left as it is ({task_hint('down', name)} first to recreate it with other settings)")
    else:
        if cluster.exists():
            _say(f"cluster {name} has state in {cluster.cluster_dir} but its API server does not answer; recreating it")
            operatorproc.stop_background(cluster)
        cluster.up()
        started = True
    if operator:
        if not (repo / "manifests" / "rbac.yaml").exists():
            raise SystemExit(f"phalanx: {repo} holds no manifests/rbac.yaml; pass --repo <checkout> or --no-operator")
        if state := operatorproc.background(cluster):
            _say(f"operator already running (pid {state['pid']}), log {state['log']}")
        else:
            handle = operatorproc.start_background(cluster, repo)
            _say(
                f"operator running in the background as system:serviceaccount:{operatorproc.NAMESPACE}:phalanx "
                f"(pid {handle.process.pid}; webhooks https://127.0.0.1:{handle.webhook_port}; metrics "
                f"http://127.0.0.1:{handle.metrics_port}/metrics); log {handle.log} ({task_hint('logs', name)})"
            )
    if export:
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    return started


def _cluster_install(args: argparse.Namespace) -> int:
    from phalanx.localcluster import deployed

    cluster = _existing(args.name)
    deployed.install(cluster, args.repo)
    _say(f"operator installed from {args.repo / deployed.OVERLAY}: 2 replicas Ready in {deployed.NAMESPACE}, one leading")
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    stop_cluster(LocalCluster(ClusterSpec(name=args.name)))
    return 0


def stop_cluster(cluster: LocalCluster) -> None:
    name = cluster.spec.name
    pid = operatorproc.stop_background(cluster)
    if pid is not None:
        left = operatorproc.webhook_configurations(cluster) if cluster.answers() else []
        withdrawn = f"its webhook configurations were left behind: {', '.join(left)}" if left else "its webhook configurations are gone"
        _say(f"stopped the operator (pid {pid}); {withdrawn}")
    if not cluster.cluster_dir.exists():
        _say(f"cluster {name} is not up; nothing else to stop")
        return
    plugins = len(cluster.driver_processes())
    jobset_controller = ", JobSet's controller" if jobset.running(cluster.kubeconfig) else ""
    cluster.down()
    _say(
        f"stopped cluster {name}: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok{jobset_controller}"
        f"{f', {plugins} dra-example-driver plugin(s)' if plugins else ''}; deleted {cluster.cluster_dir}"
    )


def _cluster_kubeconfig(args: argparse.Namespace) -> int:
    print(_existing(args.name).kubeconfig)
    return 0


def _cluster_kubectl(args: argparse.Namespace) -> int:
    cluster = _existing(args.name)
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    env = cluster.env()
    return subprocess.call([env["KWOK_KUBECTL_BINARY"], *rest], env=env)


def _cluster_logs(args: argparse.Namespace) -> int:
    cluster = _existing(args.name)
    log = cluster.cluster_dir / "operator.log"
    if not log.exists():
        raise NotUp(f"no operator log in {cluster.cluster_dir}: the operator was not started by {task_hint('up', args.name)}")
    state = operatorproc.background(cluster)
    _say(f"{log} ({'operator running, pid ' + str(state['pid']) if state else 'operator not running'})")
    with log.open() as f:
        sys.stdout.write(f.read())
        while args.follow:
            chunk = f.read()
            sys.stdout.write(chunk)
            sys.stdout.flush()
            if not chunk:
                time.sleep(0.5)
    return 0


def keep_flag(value: str) -> bool:
    """KEEP: unset, empty, 0 or false tear the demo's cluster down; 1 or true keep it; anything else is an error."""
    lowered = value.strip().lower()
    if lowered in ("", "0", "false"):
        return False
    if lowered in ("1", "true"):
        return True
    raise SystemExit(f"phalanx: KEEP={value!r} is not understood: use KEEP=1 (or true) to keep the cluster, or leave it unset")


def _demo(args: argparse.Namespace) -> int:
    keep = keep_flag(args.keep)
    cluster = LocalCluster(ClusterSpec(name=args.name))
    started = False
    if args.start:
        started = start_cluster(cluster, operator=True, repo=args.repo, export=keep)
    elif not cluster.exists():
        raise NotUp(not_up_message(args.name))
    if args.scenario != "deadlock" and operatorproc.background(cluster) is None:
        raise NotUp(
            f"the operator of cluster {args.name} is not running: {task_hint('up', args.name)} starts it "
            f"({task_hint('logs', args.name)} says why it stopped)"
        )
    try:
        if args.scenario == "all":
            return _demo_all(cluster, args)
        _demo_one(cluster, args)
        return 0
    finally:
        if started and not keep:
            stop_cluster(cluster)
        elif args.start:
            _say(f"cluster {args.name} left running; `export KUBECONFIG={cluster.kubeconfig}`, {task_hint('down', args.name)} stops it")


def _demo_one(cluster: LocalCluster, args: argparse.Namespace) -> None:
    kubectl, workloads, ns = cluster.kubectl, args.workloads, demo.NAMESPACE
    kubectl("apply", "-f", str(workloads / "namespace.yaml"))
    demo.clean(kubectl, ns)
    if args.scenario == "deadlock":
        census = demo.run_deadlock(kubectl, workloads)
        summary = (
            f"no gang policy: {census.pods_running} ranks running, {census.pods_pending} Pending for good; "
            f"{census.jobs_training} of {census.jobs} Jobs training; {census.devices_held}/{census.devices_total} GPUs held"
        )
    elif args.scenario == "gang":
        census = demo.run_gang_pair(kubectl, workloads)
        summary = (
            f"gang.minCount 4: {census.pods_running} ranks running, {census.pods_pending} held whole by Phalanx's gate; "
            f"{census.devices_held}/{census.devices_total} GPUs held, {census.devices_free} free"
        )
    elif args.scenario == "dra-preempt":
        outcome = demo.run_dra_preempt(kubectl, workloads)
        summary = (
            f"DRA preemption: train-urgent has {outcome.preemptor_running} of 4 ranks running; "
            f"{outcome.victims_taken} of train-a's {outcome.victims} ranks preempted; upstream 1.37 finds no victims here"
        )
    else:
        outcome = demo.run_preempt(kubectl, workloads, args.mode)
        summary = (
            f"disruptionMode {args.mode}: {outcome.victims_taken} of research's {outcome.victims} ranks preempted, "
            f"train-urgent has {outcome.preemptor_running} of 4 running"
        )
    print(demo.show(kubectl))
    print()
    print(summary)


def _demo_all(cluster: LocalCluster, args: argparse.Namespace) -> int:
    kubectl, workloads, ns = cluster.kubectl, args.workloads, demo.NAMESPACE
    rows = []
    kubectl("apply", "-f", str(workloads / "namespace.yaml"))

    def step(title: str) -> None:
        print(f"\n=== {title}", flush=True)
        demo.clean(kubectl, ns)

    step("1. the deadlock: two 4-rank Jobs, 6 GPUs, no gang policy (Phalanx not involved)")
    census = demo.run_deadlock(kubectl, workloads)
    rows.append(census.row("no gang policy"))
    print(demo.show(kubectl, events=6))
    step("2. gang.minCount 4 with Phalanx, no feature gate")
    both, after = demo.run_gang(kubectl, workloads)
    rows.append(both.row("Phalanx: gang.minCount 4"))
    rows.append(after.row("Phalanx: train-a deleted"))
    print(demo.show(kubectl, events=8))
    upstream = None
    if not args.no_upstream:
        print("\n=== the in-tree feature on the same control plane (1.37 with its gates, a second local cluster, no Phalanx)")
        upstream = demo.run_upstream(LocalCluster(ClusterSpec(name=f"{cluster.spec.name}-upstream", upstream_gang=True)), workloads)
        rows.insert(1, upstream[0])
        demo.clean(kubectl, ns)
    step("3. DRA preemption: urgent gang (priority 10000) vs research gang train-a (100) holding 4 GPUs")
    dra = demo.run_dra_preempt(kubectl, workloads)
    if upstream is not None:
        rows.append(upstream[1])
    rows.append(dra.row("Phalanx: DRA preemption"))
    print(demo.show(kubectl, events=8))
    for mode in ("single", "all"):
        step(f"4. node-local example.com/accel, research gang disruptionMode {mode}")
        outcome = demo.run_preempt(kubectl, workloads, mode)
        rows.append(outcome.row(f"Phalanx: accel preemption, {mode}", devices=False))
        print(demo.show(kubectl, events=8))
    demo.clean(kubectl, ns)
    demo.set_accelerators(kubectl, None)
    state = operatorproc.background(cluster)
    if state:
        print("\n=== 5. the operator's metrics")
        print(demo.metrics_summary(state["metrics_port"]))
    print()
    print(demo.format_table(rows))
    return 0
