"""`phalanx demo`'s scenarios on the Kind cluster of e2e/kind/cluster.sh, printing what they print on the local
control plane: the same workloads, the same census (localcluster.demo), driven through kubectl with the Kind
kubeconfig. The operator is the one `cluster.sh install` deployed (two replicas); its metrics are read through the
API server's pod proxy. `all` tells the story without the in-tree feature's rows; `upstream` measures those on the
comparison cluster (kind-upstream-gang.yaml: the 1.37 gates, the driver, no Phalanx). Run inside the Docker engine's
network namespace, where the API server is published:

    e2e/kind/cluster.sh demo gang                                          # ./task kind:demo -- gang
    KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml e2e/kind/cluster.sh demo upstream
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from phalanx_dev.cli.demo import _demo_one
from phalanx_dev.localcluster import demo


@dataclass(frozen=True)
class KindCluster:
    """What a scenario needs of a cluster: its kubectl."""

    kubeconfig: Path
    binary: str = "kubectl"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, "--kubeconfig", str(self.kubeconfig), *args]
        return subprocess.run(cmd, input=stdin, text=True, capture_output=True, check=check)


def metrics(cluster: KindCluster, namespace: str = "phalanx-system", port: int = 8000) -> str:
    """Each operator replica's own counters for what the demo did (non-zero samples), by pod."""
    pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", "app.kubernetes.io/name=phalanx", "-o", "json").stdout)
    out = []
    for pod in pods["items"]:
        name = pod["metadata"]["name"]
        raw = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics", check=False)
        samples = [line for line in raw.stdout.splitlines() if line.startswith(demo.METRIC_PREFIXES) and not line.endswith(" 0.0")]
        out.append(f"# {name}" + ("" if raw.returncode == 0 else f": {raw.stderr.strip()}"))
        out.extend(samples)
    return "\n".join(out)


@dataclass(frozen=True)
class Running(KindCluster):
    """A Kind cluster run_upstream may start and stop: it is up already (cluster.sh up), and cluster.sh down ends it."""

    def up(self) -> None:
        pass

    def down(self) -> None:
        pass


def demo_upstream(cluster: KindCluster, workloads: Path) -> None:
    """The in-tree feature's rows on the comparison cluster (kind-upstream-gang.yaml: the 1.37 gates, no Phalanx)."""
    gang, dra = demo.run_upstream(Running(cluster.kubeconfig, cluster.binary), workloads)
    demo.clean(cluster.kubectl, demo.NAMESPACE)
    print()
    print(demo.format_table([gang, dra]))


def demo_all(cluster: KindCluster, workloads: Path) -> None:
    kubectl, ns = cluster.kubectl, demo.NAMESPACE
    rows = []
    kubectl("apply", "-f", str(workloads / "namespace.yaml"))

    def step(title: str) -> None:
        print(f"\n=== {title}", flush=True)
        demo.clean(kubectl, ns)

    step("1. the deadlock: two 4-rank Jobs, 6 GPUs, no gang policy (Phalanx not involved)")
    rows.append(demo.run_deadlock(kubectl, workloads).row("no gang policy"))
    print(demo.show(kubectl, events=6))
    step("2. gang.minCount 4 with Phalanx, no feature gate")
    both, after = demo.run_gang(kubectl, workloads)
    rows += [both.row("Phalanx: gang.minCount 4"), after.row("Phalanx: train-a deleted")]
    print(demo.show(kubectl, events=8))
    step("3. DRA preemption: urgent gang (priority 10000) vs research gang train-a (100) holding 4 GPUs")
    rows.append(demo.run_dra_preempt(kubectl, workloads).row("Phalanx: DRA preemption"))
    print(demo.show(kubectl, events=8))
    for mode in ("single", "all"):
        step(f"4. node-local example.com/accel, research gang disruptionMode {mode}")
        rows.append(demo.run_preempt(kubectl, workloads, mode).row(f"Phalanx: accel preemption, {mode}", devices=False))
        print(demo.show(kubectl, events=8))
    demo.clean(kubectl, ns)
    demo.set_accelerators(kubectl, None)
    print("\n=== 5. the operator's metrics")
    print(metrics(cluster))
    print()
    print(demo.format_table(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=["deadlock", "gang", "dra-preempt", "preempt", "all", "metrics", "upstream"])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--workloads", type=Path, default=Path("e2e/workloads"))
    parser.add_argument("--mode", choices=["single", "all"], default="single", help="preempt: the research gang's disruptionMode")
    args = parser.parse_args()
    cluster = KindCluster(args.kubeconfig, args.kubectl)
    if args.scenario == "all":
        demo_all(cluster, args.workloads)
    elif args.scenario == "upstream":
        demo_upstream(cluster, args.workloads)
    elif args.scenario == "metrics":
        print(metrics(cluster))
    else:
        _demo_one(cluster, args)  # type: ignore[arg-type]  # it uses the cluster's kubectl only


if __name__ == "__main__":
    main()
