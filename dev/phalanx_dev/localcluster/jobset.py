"""JobSet's own controller beside the local control plane, for gangs of JobSets.

The controller is the release built from the Go module proxy (`build-kube.sh`
with PHALANX_JOBSET=1), run as a process on the host like the control plane's
own, with the CRD and the webhook configurations of that same release. Its
webhooks serve on loopback with a certificate made here (its own cert rotation
needs a Service and a Secret it would reach through a cluster network there is
none of), and the configurations point at that address by URL; the pod
webhooks get the objectSelector upstream's kustomize overlay gives them, so
pods that are no JobSet's never wait for it.

The process is found through /proc by the cluster's kubeconfig in its
environment, as the driver's plugins are, so `stop` works from any process.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from phalanx.kube import tls
from phalanx_dev.localcluster import processes

VERSION = "v0.12.0"
BINARY = "jobset-controller"
API_GROUP = "jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
_POD_WEBHOOKS = {"mpod.kb.io", "vpod.kb.io"}


class Exited(RuntimeError):
    """The controller stopped before it was ready (a port taken between choosing it and binding it, among others)."""


def webhook_configurations(release: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, served at `url` and trusting `ca_pem`; pods of no JobSet are not sent."""
    documents = [doc for doc in yaml.safe_load_all((release / "webhooks.yaml").read_text()) if doc]
    bundle = base64.b64encode(ca_pem).decode()
    for doc in documents:
        doc["metadata"]["name"] = f"jobset-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
            if hook["name"] in _POD_WEBHOOKS:
                hook["objectSelector"] = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}
    return documents


def controller_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """One controller per cluster, so no leader election; no metrics server (nothing scrapes it here)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def start(release: Path, cluster_dir: Path, kubeconfig: Path, ports: tuple[int, int]) -> tuple[int, list[dict[str, Any]]]:
    """Start the controller (in its own process group, logging to jobset/controller.log); return its pid and the
    webhook configurations to apply once it is ready."""
    webhook_port, health_port = ports
    home = cluster_dir / "jobset"
    cert = tls.generate(home / "certs", ["127.0.0.1"])
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump(controller_config(webhook_port, health_port, cert.cert_file.parent)))
    (home / "state.json").write_text(json.dumps({"health_port": health_port}))
    pid = processes.start([str(release / BINARY), f"--config={config}", f"--kubeconfig={kubeconfig}"], kubeconfig, home / "controller.log")
    return pid, webhook_configurations(release, f"https://127.0.0.1:{webhook_port}", cert.ca_pem)


def wait_ready(cluster_dir: Path, kubeconfig: Path, timeout: float = 120) -> None:
    """Its readiness probe answers only once the webhook server is serving, which is what admission needs."""
    port = json.loads((cluster_dir / "jobset" / "state.json").read_text())["health_port"]
    deadline = time.monotonic() + timeout
    while True:
        if not running(kubeconfig):
            log = (cluster_dir / "jobset" / "controller.log").read_text(errors="replace")[-3000:]
            raise Exited(f"jobset-controller exited; the end of its log:\n{log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobset-controller not ready on 127.0.0.1:{port} after {timeout:.0f}s")
        time.sleep(0.25)


def running(kubeconfig: Path) -> list[int]:
    return processes.running(BINARY, kubeconfig)


def stop(kubeconfig: Path, timeout: float = 10) -> None:
    processes.stop(BINARY, kubeconfig, timeout)
