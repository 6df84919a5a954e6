"""What the operator's view of a large cluster costs in memory, without a cluster: the curve behind the Deployment's limit.

A standalone script, not a test: it prints numbers and asserts nothing. One
process imports the operator (all of it, as `phalanx run` does), then holds
what its informers and loop would hold for N pods on NODES nodes: each object
decoded from its own JSON text (a watch event is decoded alone) and kept as
`kube/trim.py` keeps it, then one planner snapshot of them and its shortfall
capacity (the loop keeps the last of each), built once afresh and once more
reusing what the first derived (`deviceinputs.Reuse`, which the loop also keeps). The objects are a pod, a node and
a ResourceSlice as a kwok cluster's API server returned them
(`benchmarks/fixtures/`), renamed: pod i on node i mod NODES, each slice on its own node (so the
snapshot places every pod and device, as the loop's does). RSS (VmRSS) is read after each level; the
running operator adds its event loop, clients and caches of the PodGroups
(`./task bench -- --scale` measures it live, far more slowly).

Usage: python benchmarks/informer_memory.py [--nodes 1000] [--pods 10000,50000,100000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import phalanx.manager  # noqa: F401  (the operator's imports: most of its memory at rest)
from phalanx.kube import trim
from phalanx.scheduling import deviceinputs, shortfall, snapshots
from phalanx.scheduling.occupancy import Occupancy, Writes

FIXTURES = Path(__file__).parent / "fixtures"


def rss_mib() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def renamed(template: str, old: str, new: str) -> str:
    return template.replace(old, new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", default="10000,50000,100000")
    args = parser.parse_args()
    pod_text = (FIXTURES / "kwok-pod.json").read_text()
    node_text = (FIXTURES / "kwok-node.json").read_text()
    slice_text = (FIXTURES / "kwok-slice.json").read_text()
    pod_name, node_name = json.loads(pod_text)["metadata"]["name"], json.loads(node_text)["metadata"]["name"]
    slice_name = json.loads(slice_text)["metadata"]["name"]
    slice_node = json.loads(slice_text)["spec"]["nodeName"]
    pod_node = json.loads(pod_text)["spec"]["nodeName"]
    base = rss_mib()
    node_uid, slice_uid = json.loads(node_text)["metadata"]["uid"], json.loads(slice_text)["metadata"]["uid"]
    nodes = [
        trim.node(json.loads(renamed(renamed(node_text, node_name, f"w-{i}"), node_uid, f"{i:08d}-{node_uid[9:]}")))
        for i in range(args.nodes)
    ]
    slices = [
        trim.common(
            json.loads(
                renamed(
                    renamed(renamed(slice_text, slice_name, f"s-{i}"), f'"{slice_node}"', f'"w-{i}"'), slice_uid, f"{i:08d}-{slice_uid[9:]}"
                )
            )
        )
        for i in range(args.nodes)
    ]
    with_nodes = rss_mib()
    print(f"imports: {base:.0f} MiB; {args.nodes:,} nodes and their slices: +{with_nodes - base:.0f} MiB")
    print("| pods | RSS | of it, the pods | per pod | snapshot build | rebuilt, nothing written |")
    print("|---|---|---|---|---|---|")
    pods: list[dict] = []
    last = None
    for level in [int(p) for p in args.pods.split(",")]:
        uid = json.loads(pod_text)["metadata"]["uid"]
        pods += [
            trim.pod(
                json.loads(
                    renamed(
                        renamed(renamed(pod_text, pod_name, f"p-{i}"), uid, f"{i:08d}-{uid[9:]}"), f'"{pod_node}"', f'"w-{i % args.nodes}"'
                    )
                )
            )
            for i in range(len(pods), level)
        ]
        last = None  # the loop holds one snapshot, one capacity, its occupancy and what the slices published at a time
        occupancy, reuse = Occupancy(), deviceinputs.Reuse()
        started = time.process_time()
        held = occupancy.assemble(occupancy.apply(Writes.of(nodes), Writes.of(pods)), {}, {}, [])
        snapshot = snapshots.compose(held, slices, deviceinputs.modelled([]), [], reuse=reuse)
        last = (snapshot, shortfall.capacity(snapshot), occupancy, reuse)
        built = time.process_time() - started
        started = time.process_time()
        held = occupancy.assemble(occupancy.apply(Writes({}), Writes({})), {}, {}, [])  # the next cycle's, nothing written
        snapshot = snapshots.compose(held, slices, deviceinputs.modelled([]), [], reuse=reuse)
        last = (snapshot, shortfall.capacity(snapshot), occupancy, reuse)
        rebuilt = time.process_time() - started
        now = rss_mib()
        print(
            f"| {level:,} | {now:.0f} MiB | {now - with_nodes:.0f} MiB | {1024 * 1024 * (now - with_nodes) / level:,.0f} B | {built:.2f} s "
            f"| {rebuilt:.2f} s |"
        )
    assert last is not None
    return 0


if __name__ == "__main__":
    sys.exit(main())
