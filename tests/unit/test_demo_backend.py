"""`phalanx demo --backend`: the Kind cluster's name read from its config, the operator's metrics by replica."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from phalanx.cli.metrics import lines
from phalanx_dev.cli.demo import Kind, Local, backend_for, replica_blocks
from phalanx_dev.kind.cluster import KindCluster, ReplicaMetrics, config_name
from phalanx_dev.localcluster.demo import metric_samples

REPO = Path(__file__).resolve().parents[2]
EXPOSITION = """# HELP phalanx_released_pods_total Pods released.
# TYPE phalanx_released_pods_total counter
phalanx_released_pods_total 8.0
phalanx_podgroup_disruptions_total{mode="single"} 0.0
phalanx_podgroup_disruptions_total{mode="all"} 4.0
process_cpu_seconds_total 3.0
"""


def test_config_name_is_the_top_level_name() -> None:
    assert config_name("kind: Cluster\nname: phalanx-upstream\nnodes:\n- role: worker\n  name: not-this\n") == "phalanx-upstream"


def test_config_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match="names no cluster"):
        config_name("kind: Cluster\nnodes: []\n")


@pytest.mark.parametrize(("config", "name"), [("kind.yaml", "phalanx"), ("kind-upstream-gang.yaml", "phalanx-upstream")])
def test_the_repository_configs_name_the_clusters_cluster_sh_makes(config: str, name: str) -> None:
    assert KindCluster.of(REPO, config).name == name


def test_metric_samples_keep_the_demo_counters_that_moved() -> None:
    assert metric_samples(EXPOSITION).splitlines() == [
        "phalanx_released_pods_total 8.0",
        'phalanx_podgroup_disruptions_total{mode="all"} 4.0',
    ]


def test_replica_blocks_head_each_replica_and_say_why_one_gave_nothing() -> None:
    replicas = [ReplicaMetrics("phalanx-a", EXPOSITION), ReplicaMetrics("phalanx-b", "", "error: pods phalanx-b not found")]
    assert replica_blocks(replicas, lines).splitlines() == [
        "# phalanx-a",
        'phalanx_podgroup_disruptions_total{mode="all"} 4',
        'phalanx_podgroup_disruptions_total{mode="single"} 0',
        "phalanx_released_pods_total 8",
        "# phalanx-b: error: pods phalanx-b not found",
    ]


def test_backend_for_picks_the_cluster_by_the_switch() -> None:
    local = backend_for(argparse.Namespace(backend="local", name="phalanx", repo=REPO))
    kind = backend_for(argparse.Namespace(backend="kind", name="phalanx", repo=REPO))
    assert isinstance(local, Local) and local.hint("gang") == "`./task gang`"
    assert isinstance(kind, Kind) and kind.hint("gang") == "`BACKEND=kind ./task gang`"


def test_kind_backend_refuses_a_name_its_config_does_not_give() -> None:
    with pytest.raises(SystemExit, match=r"named by .*kind\.yaml"):
        backend_for(argparse.Namespace(backend="kind", name="other", repo=REPO))
