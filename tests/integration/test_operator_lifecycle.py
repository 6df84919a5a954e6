"""The operator's life beside the local control plane: it refuses to start without its CRDs, and a clean shutdown
in local (URL) mode leaves no webhook configuration that would refuse gang Jobs with "connection refused".

Slices: none (a cluster of its own, one worker without GPUs: nothing here schedules a device).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, cluster_name

from phalanx_dev.localcluster import ClusterSpec, LocalCluster, operatorproc

pytestmark = pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="starts a local control plane of its own")

GANG_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "gang", "namespace": "default", "annotations": {"scheduling.phalanx.dev/min-count": "1"}},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}},
}


@pytest.fixture(scope="module")
def bare() -> Iterator[LocalCluster]:
    """A cluster with no CRD of Phalanx's installed yet."""
    local = LocalCluster(ClusterSpec(name=cluster_name("op"), workers=1, gpus_per_worker=0))
    try:
        local.up()
        yield local
    finally:
        operatorproc.stop_background(local)
        local.down()


def _run_operator(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "phalanx",
        "run",
        "--webhook-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
        "--liveness",
        "http://127.0.0.1:0/healthz",
    ]
    return subprocess.run(args, env=dict(os.environ, KUBECONFIG=str(kubeconfig)), capture_output=True, text=True, timeout=120)


def test_without_its_crds_the_operator_stops_at_once_and_says_how_to_install_them(bare: LocalCluster) -> None:
    proc = _run_operator(bare.kubeconfig)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "the CRDs of scheduling.phalanx.dev/v1beta1 are not installed" in proc.stderr
    assert "kubectl apply -k crds/" in proc.stderr
    assert operatorproc.webhook_configurations(bare) == [], "nothing was written before giving up"


def test_an_api_server_that_does_not_answer_is_named(bare: LocalCluster, tmp_path: Path) -> None:
    dead = tmp_path / "kubeconfig"
    config = bare.kubeconfig.read_text()
    server = next(line.split("server:", 1)[1].strip() for line in config.splitlines() if "server:" in line)
    dead.write_text(config.replace(server, "https://127.0.0.1:1"))
    proc = _run_operator(dead)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "the API server at https://127.0.0.1:1 does not answer" in proc.stderr


def test_a_clean_shutdown_withdraws_the_webhook_configurations(bare: LocalCluster) -> None:
    """...and removes the directory its serving key was written to (kept in the cluster's own directory, which `down`
    deletes, not in the machine's temp dir, where every start left one behind)."""
    before = set(Path(tempfile.gettempdir()).glob("phalanx-tls-*"))
    handle = operatorproc.start_background(bare, ROOT)
    try:
        assert operatorproc.background(bare)["pid"] == handle.process.pid
        (keys_dir,) = (bare.cluster_dir / "tmp").glob("phalanx-tls-*")
        assert any(keys_dir.iterdir()), "the serving certificate and key are written there"
        assert sorted(operatorproc.webhook_configurations(bare)) == [
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/jobs.scheduling.phalanx.dev",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/jobs.scheduling.phalanx.dev",
        ]
        served = json.loads(bare.kubectl("get", "mutatingwebhookconfiguration", operatorproc.WEBHOOK_CONFIGURATION, "-o", "json").stdout)
        assert served["webhooks"][0]["clientConfig"]["url"].startswith(f"https://127.0.0.1:{handle.webhook_port}/")
    finally:
        pid = operatorproc.stop_background(bare)
    assert pid == handle.process.pid
    assert operatorproc.background(bare) is None
    assert operatorproc.webhook_configurations(bare) == [], "a stopped operator leaves nothing pointing at its dead port"
    assert not keys_dir.exists(), "its private key went with it"
    assert set(Path(tempfile.gettempdir()).glob("phalanx-tls-*")) <= before, "nothing left in the machine's temp dir"
    log = (bare.cluster_dir / "operator.log").read_text()
    assert "webhook configurations jobs.scheduling.phalanx.dev deleted" in log
    # The trade-off: with no operator, a gang Job is admitted (ungated) instead of refused with "connection refused".
    created = bare.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(GANG_JOB), check=False)
    assert created.returncode == 0, created.stderr
    assert "connection refused" not in created.stderr


def test_the_install_manifests_check_out_once_the_local_operator_is_stopped(bare: LocalCluster) -> None:
    """The README's Troubleshooting row: the local operator's URL configurations share the names of
    manifests/webhooks.yaml, so a server-side dry run of the install clashes with them while it runs, and passes once
    it is stopped (its namespace, which the dry run cannot create, applied first)."""
    check = ("apply", "-k", str(ROOT / "manifests"), "--dry-run=server")
    handle = operatorproc.start_background(bare, ROOT)
    try:
        clash = bare.kubectl(*check, check=False)
        assert clash.returncode != 0 and "exactly one of url or service is required" in clash.stderr, clash.stderr[-2000:]
    finally:
        assert operatorproc.stop_background(bare) == handle.process.pid
    bare.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"))
    clean = bare.kubectl(*check, check=False)
    assert clean.returncode == 0, clean.stderr[-2000:]


def test_cluster_up_on_a_cluster_that_is_up_says_so_and_keeps_it(bare: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from phalanx import cli

    bare.kubectl("create", "configmap", "still-here", "-n", "default")
    try:
        assert cli.main(["cluster", "up", "--name", bare.spec.name, "--no-operator"]) == 0
        captured = capsys.readouterr()
        assert f"cluster {bare.spec.name} is already up; left as it is" in captured.err
        assert captured.out.strip() == f"export KUBECONFIG={bare.kubeconfig}"
        assert bare.kubectl("get", "configmap", "still-here", "-n", "default", check=False).returncode == 0, "not recreated"
    finally:
        bare.kubectl("delete", "configmap", "still-here", "-n", "default", check=False)
