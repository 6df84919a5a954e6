"""How the real driver's plugin is configured and what the chart applies beside it; no process is started here."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx_dev.localcluster import ClusterSpec, dradriver
from phalanx_dev.localcluster.cluster import MAX_DRIVER_WORKERS


def test_device_class_is_the_charts() -> None:
    assert dradriver.device_class() == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
    }


def test_each_plugin_gets_its_own_node_directories_and_no_port() -> None:
    env = dradriver.plugin_env(Path("/c"), Path("/c/kubeconfig.yaml"), "worker-2", 4)
    assert env["NODE_NAME"] == "worker-2"
    assert env["NUM_DEVICES"] == "4"
    assert env["KUBECONFIG"] == "/c/kubeconfig.yaml"
    assert env["CDI_ROOT"] == "/c/dra/worker-2/cdi"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/c/dra/worker-2/plugins"
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/c/dra/worker-2/registry"
    assert (env["HEALTHCHECK_PORT"], env["METRICS_PORT"]) == ("-1", "-1")


def test_a_socket_path_too_long_for_unix_sockets_is_refused_before_start(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    with pytest.raises(ValueError, match="socket path too long"):
        dradriver.start(Path("/nonexistent"), deep, deep / "kubeconfig.yaml", ["worker-1"], 1)
    assert not (deep / "dra").exists()


def test_the_driver_publishes_for_small_clusters_and_the_stand_in_for_large_ones() -> None:
    assert ClusterSpec(workers=MAX_DRIVER_WORKERS).slice_source == "dra-example-driver"
    assert ClusterSpec(workers=MAX_DRIVER_WORKERS + 1).slice_source == "fakegpu"
    assert ClusterSpec(workers=3, driver="fakegpu").slice_source == "fakegpu"
    assert ClusterSpec(workers=100, driver="dra-example-driver").slice_source == "dra-example-driver"
