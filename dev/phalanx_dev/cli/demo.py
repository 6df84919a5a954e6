"""`phalanx demo`: the article's scenarios on the local cluster, and what each shows."""

from __future__ import annotations

import argparse
from pathlib import Path

from phalanx.cli.common import DEFAULT_REPO, NotUp, add_name, say, task_hint
from phalanx_dev.cli.cluster import not_up_message, start_cluster, stop_cluster
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, demo, operatorproc


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run_demo = commands.add_parser("demo", help="run the article's scenarios on the local cluster and print what it shows")
    run_demo.add_argument(
        "scenario",
        choices=["deadlock", "gang", "dra-preempt", "preempt", "all"],
        help="deadlock: no gang policy; gang: gang.minCount 4; dra-preempt: an urgent gang preempts one holding GPUs; "
        "preempt: the same on a node-local extended resource (--mode); all: the whole story and its table",
    )
    add_name(run_demo)
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


def run(args: argparse.Namespace) -> int:
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
            say(f"cluster {args.name} left running; `export KUBECONFIG={cluster.kubeconfig}`, {task_hint('down', args.name)} stops it")


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
