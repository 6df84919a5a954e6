"""`phalanx demo`: the article's scenarios and what each shows, on the local cluster or on Kind (`--backend kind`, the
cluster of e2e/kind/cluster.sh). One runner tells every scenario; a backend is the cluster it runs on."""

from __future__ import annotations

import argparse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from phalanx.cli import metrics as metrics_cli
from phalanx.cli.common import DEFAULT_REPO, NotUp, add_name, say, task_hint
from phalanx_dev.cli.cluster import not_up_message, start_cluster, stop_cluster
from phalanx_dev.kind.cluster import KindCluster, ReplicaMetrics
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, demo, operatorproc

BACKENDS = ("local", "kind")


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run_demo = commands.add_parser("demo", help="run the article's scenarios on the local cluster (or Kind) and print what it shows")
    run_demo.add_argument(
        "scenario",
        choices=["deadlock", "gang", "dra-preempt", "preempt", "all", "metrics"],
        help="deadlock: no gang policy; gang: gang.minCount 4; dra-preempt: an urgent gang preempts one holding GPUs; "
        "preempt: the same on a node-local extended resource (--mode); all: the whole story and its table; "
        "metrics: the operator's phalanx_ metrics (each replica's on Kind)",
    )
    add_name(run_demo)
    run_demo.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: the local control plane (default); kind: the Kind cluster of e2e/kind/cluster.sh (BACKEND=kind ./task ...)",
    )
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
    run_demo.set_defaults(func=run)


def keep_flag(value: str) -> bool:
    """KEEP: unset, empty, 0 or false tear the demo's cluster down; 1 or true keep it; anything else is an error."""
    lowered = value.strip().lower()
    if lowered in ("", "0", "false"):
        return False
    if lowered in ("1", "true"):
        return True
    raise SystemExit(f"phalanx: KEEP={value!r} is not understood: use KEEP=1 (or true) to keep the cluster, or leave it unset")


class Local:
    """The local control plane of `phalanx cluster up`, its operator a process beside it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cluster = LocalCluster(ClusterSpec(name=name))
        self.kubectl = self.cluster.kubectl

    def exists(self) -> bool:
        return self.cluster.exists()

    def operator_running(self) -> bool:
        return operatorproc.background(self.cluster) is not None

    def hint(self, command: str) -> str:
        return task_hint(command, self.name)

    def not_up(self) -> str:
        return not_up_message(self.name)

    def operator_down(self) -> str:
        return f"the operator of cluster {self.name} is not running: {self.hint('up')} starts it ({self.hint('logs')} says why it stopped)"

    def start(self, repo: Path, keep: bool) -> bool:
        return start_cluster(self.cluster, operator=True, repo=repo, export=keep)

    def stop(self) -> None:
        stop_cluster(self.cluster)

    def left_running(self) -> str:
        return f"cluster {self.name} left running; `export KUBECONFIG={self.cluster.kubeconfig}`, {self.hint('down')} stops it"

    comparison_label = "on the same control plane (1.37 with its gates, a second local cluster, no Phalanx)"

    def comparison(self) -> LocalCluster:
        return LocalCluster(ClusterSpec(name=f"{self.name}-upstream", upstream_gang=True))

    def metrics(self, select: Callable[[str], list[str]]) -> str | None:
        state = operatorproc.background(self.cluster)
        if state is None:
            return None
        with urllib.request.urlopen(f"http://127.0.0.1:{state['metrics_port']}/metrics", timeout=10) as response:
            return "\n".join(select(response.read().decode()))


class Kind:
    """The Kind cluster of e2e/kind/cluster.sh (kind.yaml), the operator its Deployment's two replicas."""

    def __init__(self, name: str, repo: Path) -> None:
        self.repo = repo
        self.cluster = KindCluster.of(repo)
        if name != self.cluster.name:
            raise SystemExit(
                f"phalanx: the Kind cluster is {self.cluster.name}, named by {self.cluster.config}; --name {name} (CLUSTER=) is the local backend's"
            )
        self.name = name
        self.kubectl = self.cluster.kubectl

    def exists(self) -> bool:
        return self.cluster.answers()

    def operator_running(self) -> bool:
        return self.cluster.operator_running()

    def hint(self, command: str) -> str:
        return f"`BACKEND=kind ./task {command}`"

    def not_up(self) -> str:
        return f"Kind cluster {self.name} is not up: start it with {self.hint('up')}"

    def operator_down(self) -> str:
        return (
            f"the operator of Kind cluster {self.name} has no replica available: {self.hint('up')} installs it "
            "(`e2e/kind/cluster.sh kubectl -n phalanx-system get pods` says why)"
        )

    def start(self, repo: Path, keep: bool) -> bool:
        started = not self.cluster.answers()
        if started or not self.cluster.operator_running():
            self.cluster.up()
        else:
            say(f"Kind cluster {self.name} is already up, the operator rolled out; left as it is")
        return started

    def stop(self) -> None:
        self.cluster.down()

    def left_running(self) -> str:
        return f"Kind cluster {self.name} left running; `e2e/kind/cluster.sh kubectl ...` reaches it, {self.hint('down')} stops it"

    comparison_label = "on Kind (1.37 with its gates, a second Kind cluster: kind-upstream-gang.yaml, no Phalanx)"

    def comparison(self) -> KindCluster:
        return KindCluster.of(self.repo, "kind-upstream-gang.yaml", operator=False)

    def metrics(self, select: Callable[[str], list[str]]) -> str | None:
        return replica_blocks(self.cluster.metrics(), select)


def replica_blocks(replicas: list[ReplicaMetrics], select: Callable[[str], list[str]]) -> str:
    """One block per operator replica, headed by its pod's name (and the proxy's error where it gave nothing)."""
    out = []
    for replica in replicas:
        out.append(f"# {replica.pod}" + (f": {replica.error}" if replica.error else ""))
        out.extend(select(replica.exposition))
    return "\n".join(out)


def backend_for(args: argparse.Namespace) -> Local | Kind:
    return Kind(args.name, args.repo) if args.backend == "kind" else Local(args.name)


def run(args: argparse.Namespace) -> int:
    keep = keep_flag(args.keep)
    backend = backend_for(args)
    started = False
    if args.start:
        started = backend.start(args.repo, keep)
    elif not backend.exists():
        raise NotUp(backend.not_up())
    if args.scenario != "deadlock" and not backend.operator_running():
        raise NotUp(backend.operator_down())
    try:
        if args.scenario == "metrics":
            print(backend.metrics(metrics_cli.lines) or "")
        elif args.scenario == "all":
            _demo_all(backend, args)
        else:
            _demo_one(backend.kubectl, args)
        return 0
    finally:
        if started and not keep:
            backend.stop()
        elif args.start:
            say(backend.left_running())


def _demo_one(kubectl: demo.Kubectl, args: argparse.Namespace) -> None:
    workloads, ns = args.workloads, demo.NAMESPACE
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


def _demo_all(backend: Local | Kind, args: argparse.Namespace) -> None:
    kubectl, workloads, ns = backend.kubectl, args.workloads, demo.NAMESPACE
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
        print(f"\n=== the in-tree feature {backend.comparison_label}", flush=True)
        upstream = demo.run_upstream(backend.comparison(), workloads)
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
    summary = backend.metrics(lambda exposition: demo.metric_samples(exposition).splitlines())
    if summary is not None:
        print("\n=== 5. the operator's metrics")
        print(summary)
    print()
    print(demo.format_table(rows))
