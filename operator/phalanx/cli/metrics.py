"""`phalanx metrics`: the running operator's current values, as the article's `task metrics` prints kube-scheduler's
`scheduler_podgroup_*` lines: every `phalanx_` sample, histograms as their count and sum."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

DEFAULT_URL = "http://127.0.0.1:8000/metrics"


def lines(exposition: str) -> list[str]:
    out = []
    for family in text_string_to_metric_families(exposition):
        if not family.name.startswith("phalanx_"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            value = int(sample.value) if float(sample.value).is_integer() else sample.value
            out.append(f"{sample.name}{{{labels}}} {value}" if labels else f"{sample.name} {value}")
    return sorted(out)


def add_parser(commands: argparse._SubParsersAction, default_cluster: str) -> None:  # type: ignore[type-arg]
    """`default_cluster`: the other commands' default (`$PHALANX_CLUSTER`, else phalanx), so `metrics` asks the same cluster."""
    parser = commands.add_parser("metrics", help="print the running operator's phalanx_ metrics")
    parser.add_argument(
        "--url",
        help=f"the operator's metrics URL (default: the local cluster's operator where phalanx-dev is installed, else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--name", default=default_cluster, help="the local cluster whose operator to ask (default $PHALANX_CLUSTER or phalanx)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url, not_up = args.url, None
    if url is None and importlib.util.find_spec("phalanx_dev") is not None:
        # where the development package is installed (./task), the local cluster's operator is asked first
        from phalanx_dev.cli.cluster import not_up_message
        from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc

        local = LocalCluster(ClusterSpec(name=args.name))
        recorded = operatorproc.port_file(local.cluster_dir)
        url = f"http://127.0.0.1:{recorded.read_text().strip()}/metrics" if recorded.exists() else None
        not_up = None if local.exists() else not_up_message(args.name)
    url = url or DEFAULT_URL
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        if not_up is not None:  # no local cluster, and nothing on the default port either
            print(f"error: {not_up}; no operator metrics at {url} either (--url to ask another)", file=sys.stderr)
            return 1
        print(f"error: no operator metrics at {url} ({exc}); is the operator running? (--url to point elsewhere)", file=sys.stderr)
        return 1
    print("\n".join(lines(body)))
    return 0
