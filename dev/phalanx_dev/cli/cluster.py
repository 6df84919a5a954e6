"""`phalanx cluster`: the local control plane (up, install, down, kubeconfig, kubectl, logs) and its operator."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from phalanx.cli.common import DEFAULT_REPO, NotUp, add_name, say, task_hint
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, jobset, kueue, lws, operatorproc
from phalanx_dev.localcluster.cluster import MAX_DRIVER_WORKERS


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = commands.add_parser("cluster", help="the local control plane (etcd, apiserver, scheduler, kwok nodes) and its operator")
    cluster_commands = cluster.add_subparsers(required=True, metavar="ACTION")
    up = cluster_commands.add_parser("up", help="build (once) and start the cluster, its DRA driver, the CRDs and the operator")
    add_name(up)
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
    up.add_argument(
        "--lws", action="store_true", help="also run LeaderWorkerSet's controller (built from the Go module proxy) with its CRD"
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="also run Kueue's controller manager (built from the Go module proxy) with its CRDs (README: Behind Kueue)",
    )
    up.add_argument("--no-operator", action="store_true", help="do not start the operator (the CRDs are not installed either)")
    up.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"checkout holding crds/ and manifests/ (default {DEFAULT_REPO})")
    up.set_defaults(func=_up)
    install = cluster_commands.add_parser(
        "install",
        help="install the operator as a user does, on the cluster's real nodes: its image built and loaded here, `kubectl apply -k e2e/install`",
    )
    add_name(install)
    install.add_argument("--repo", type=Path, default=DEFAULT_REPO, help=f"checkout to build the image from (default {DEFAULT_REPO})")
    install.set_defaults(func=_install)
    down = cluster_commands.add_parser("down", help="stop the operator, the driver and the cluster, and delete its state")
    add_name(down)
    down.set_defaults(func=_down)
    kubeconfig = cluster_commands.add_parser("kubeconfig", help="print the admin kubeconfig path")
    add_name(kubeconfig)
    kubeconfig.set_defaults(func=_kubeconfig)
    kubectl = cluster_commands.add_parser(
        "kubectl", help="run the matching kubectl against the cluster (`phalanx cluster kubectl -n ml-team get pods`)"
    )
    add_name(kubectl)
    kubectl.add_argument("args", nargs=argparse.REMAINDER, help="kubectl's arguments")
    kubectl.set_defaults(func=_kubectl)
    logs = cluster_commands.add_parser("logs", help="print the log of the operator `cluster up` started")
    add_name(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing as the operator logs")
    logs.set_defaults(func=_logs)


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


def existing(name: str) -> LocalCluster:
    cluster = LocalCluster(ClusterSpec(name=name))
    if not cluster.exists():
        raise NotUp(not_up_message(name))
    return cluster


def _up(args: argparse.Namespace) -> int:
    spec = ClusterSpec(
        name=args.name,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        real_nodes=args.real_nodes,
        jobset=args.jobset,
        lws=args.lws,
        kueue=args.kueue,
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
        say(f"cluster {name} is already up; left as it is ({task_hint('down', name)} first to recreate it with other settings)")
    else:
        if cluster.exists():
            say(f"cluster {name} has state in {cluster.cluster_dir} but its API server does not answer; recreating it")
            operatorproc.stop_background(cluster)
        cluster.up()
        started = True
    if operator:
        if not (repo / "manifests" / "rbac.yaml").exists():
            raise SystemExit(f"phalanx: {repo} holds no manifests/rbac.yaml; pass --repo <checkout> or --no-operator")
        if state := operatorproc.background(cluster):
            say(f"operator already running (pid {state['pid']}), log {state['log']}")
        else:
            handle = operatorproc.start_background(cluster, repo)
            say(
                f"operator running in the background as system:serviceaccount:{operatorproc.NAMESPACE}:phalanx "
                f"(pid {handle.process.pid}; webhooks https://127.0.0.1:{handle.webhook_port}; metrics "
                f"http://127.0.0.1:{handle.metrics_port}/metrics); log {handle.log} ({task_hint('logs', name)})"
            )
    if export:
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    return started


def _install(args: argparse.Namespace) -> int:
    from phalanx_dev.localcluster import deployed

    cluster = existing(args.name)
    deployed.install(cluster, args.repo)
    say(f"operator installed from {args.repo / deployed.OVERLAY}: 2 replicas Ready in {deployed.NAMESPACE}, one leading")
    return 0


def _down(args: argparse.Namespace) -> int:
    stop_cluster(LocalCluster(ClusterSpec(name=args.name)))
    return 0


def stop_cluster(cluster: LocalCluster) -> None:
    name = cluster.spec.name
    pid = operatorproc.stop_background(cluster)
    if pid is not None:
        left = operatorproc.webhook_configurations(cluster) if cluster.answers() else []
        withdrawn = f"its webhook configurations were left behind: {', '.join(left)}" if left else "its webhook configurations are gone"
        say(f"stopped the operator (pid {pid}); {withdrawn}")
    if not cluster.cluster_dir.exists():
        say(f"cluster {name} is not up; nothing else to stop")
        return
    plugins = len(cluster.driver_processes())
    jobset_controller = ", JobSet's controller" if jobset.running(cluster.kubeconfig) else ""
    jobset_controller += ", LeaderWorkerSet's controller" if lws.running(cluster.kubeconfig) else ""
    jobset_controller += ", Kueue's controller manager" if kueue.running(cluster.kubeconfig) else ""
    cluster.down()
    say(
        f"stopped cluster {name}: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok{jobset_controller}"
        f"{f', {plugins} dra-example-driver plugin(s)' if plugins else ''}; deleted {cluster.cluster_dir}"
    )


def _kubeconfig(args: argparse.Namespace) -> int:
    print(existing(args.name).kubeconfig)
    return 0


def _kubectl(args: argparse.Namespace) -> int:
    cluster = existing(args.name)
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    env = cluster.env()
    return subprocess.call([env["KWOK_KUBECTL_BINARY"], *rest], env=env)


def _logs(args: argparse.Namespace) -> int:
    cluster = existing(args.name)
    log = cluster.cluster_dir / "operator.log"
    if not log.exists():
        raise NotUp(f"no operator log in {cluster.cluster_dir}: the operator was not started by {task_hint('up', args.name)}")
    state = operatorproc.background(cluster)
    say(f"{log} ({'operator running, pid ' + str(state['pid']) if state else 'operator not running'})")
    with log.open() as f:
        sys.stdout.write(f.read())
        while args.follow:
            chunk = f.read()
            sys.stdout.write(chunk)
            sys.stdout.flush()
            if not chunk:
                time.sleep(0.5)
    return 0
