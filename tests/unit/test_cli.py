"""The cluster name reaches every hint and every command: a user on a second cluster is never sent to the default one."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import cli
from phalanx.cli import common, metrics
from phalanx_dev.cli import cluster
from phalanx_dev.localcluster import LocalCluster


def test_hints_name_the_cluster_unless_it_is_the_default() -> None:
    assert common.task_hint("logs", "phalanx") == "`./task logs`"
    assert common.task_hint("logs", "gpu-lab") == "`CLUSTER=gpu-lab ./task logs`"
    assert "`CLUSTER=gpu-lab ./task up`" in cluster.not_up_message("gpu-lab")


def test_not_up_names_the_clusters_that_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    for name in ("gpu-lab", "stale"):
        (tmp_path / "kwok" / "clusters" / name).mkdir(parents=True)
    monkeypatch.setattr(LocalCluster, "answers", lambda self: self.spec.name == "gpu-lab")
    message = cluster.not_up_message("phalanx")
    assert message.startswith("cluster phalanx is not up: start it with `./task up`"), message
    assert "up here: gpu-lab (pick one with `CLUSTER=NAME ./task ...` or `--name NAME`)" in message, message
    assert "stale" not in message


@pytest.mark.parametrize("argv", [["metrics"], ["cluster", "logs"], ["cluster", "down"], ["demo", "gang"]])
def test_every_command_takes_its_cluster_from_the_environment(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHALANX_CLUSTER", "gpu-lab")
    assert cli.parser().parse_args(argv).name == "gpu-lab"
    monkeypatch.delenv("PHALANX_CLUSTER")
    assert cli.parser().parse_args(argv).name == "phalanx"


def test_metrics_listen_on_every_address_in_cluster_by_default() -> None:
    """In a pod Prometheus scrapes the pod's IP; the local mode binds loopback (`--metrics-listen 127.0.0.1`)."""
    assert cli.parser().parse_args(["run"]).metrics_listen == "0.0.0.0"


def test_metrics_of_a_cluster_that_is_not_up_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No local cluster of that name, nothing on the default port: the cluster is named as not up, not a refused URL."""
    monkeypatch.setenv("PHALANX_CACHE", str(tmp_path))
    monkeypatch.setattr(metrics, "DEFAULT_URL", "http://127.0.0.1:9/metrics")  # discard: nothing answers
    assert cli.main(["metrics", "--name", "gpu-lab"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cluster gpu-lab is not up: start it with `CLUSTER=gpu-lab ./task up`"), err
    assert "Traceback" not in err


def test_explain_without_a_cluster_to_ask_names_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "kubeconfig.yaml"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert cli.main(["explain", "train", "-n", "ml"]) == 1
    err = capsys.readouterr().err
    assert f"error: no cluster to ask: the kubeconfig {missing} cannot be loaded" in err and "./task up" in err, err
