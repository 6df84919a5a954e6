"""LeaderWorkerSet's own controller beside the local control plane, for gangs of LWS replicas.

As JobSet's (`jobset`): the release built from the Go module proxy
(`build-kube.sh` with PHALANX_LWS=1), run as a process on the host, with the
CRDs and webhook configurations of that same release. Its webhooks serve on
loopback with a certificate made here (its internal cert management off), the
configurations point at that address by URL, and its pod webhooks get the
objectSelector upstream's kustomize overlay gives them, so pods that are no
LWS's never wait for it. The release's controller also runs DisaggregatedSets,
so their CRD is installed too (the controller's watch of them fails without it).

Its readiness probe answers before the webhook server listens, so readiness
here is both: the probe, then a TCP connection to the webhook port.
"""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from phalanx.kube import tls
from phalanx_dev.localcluster import processes

VERSION = "v0.9.0"
BINARY = "lws-controller"
API_GROUP = "leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
_POD_WEBHOOKS = {"mpod.kb.io", "vpod.kb.io"}


class Exited(RuntimeError):
    """The controller stopped before it was ready."""


def webhook_configurations(release: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, served at `url` and trusting `ca_pem`; pods of no LWS are not sent."""
    documents = [doc for doc in yaml.safe_load_all((release / "webhooks.yaml").read_text()) if doc]
    bundle = base64.b64encode(ca_pem).decode()
    for doc in documents:
        doc["metadata"]["name"] = f"lws-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
            if hook["name"] in _POD_WEBHOOKS:
                hook["objectSelector"] = {"matchExpressions": [{"key": NAME_LABEL, "operator": "Exists"}]}
    return documents


def controller_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """One controller per cluster, so no leader election; no metrics server; no gang scheduling of its own."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def start(release: Path, cluster_dir: Path, kubeconfig: Path, ports: tuple[int, int]) -> tuple[int, list[dict[str, Any]]]:
    """Start the controller (its own process group, logging to lws/controller.log); return its pid and the webhook
    configurations to apply once it is ready."""
    webhook_port, health_port = ports
    home = cluster_dir / "lws"
    cert = tls.generate(home / "certs", ["127.0.0.1"])
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump(controller_config(webhook_port, health_port, cert.cert_file.parent)))
    (home / "state.json").write_text(json.dumps({"health_port": health_port, "webhook_port": webhook_port}))
    pid = processes.start([str(release / BINARY), f"--config={config}", f"--kubeconfig={kubeconfig}"], kubeconfig, home / "controller.log")
    return pid, webhook_configurations(release, f"https://127.0.0.1:{webhook_port}", cert.ca_pem)


def _serving(port: int, path: str | None) -> bool:
    try:
        if path is None:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(cluster_dir: Path, kubeconfig: Path, timeout: float = 120) -> None:
    state = json.loads((cluster_dir / "lws" / "state.json").read_text())
    deadline = time.monotonic() + timeout
    while True:
        if not running(kubeconfig):
            log = (cluster_dir / "lws" / "controller.log").read_text(errors="replace")[-3000:]
            raise Exited(f"lws-controller exited; the end of its log:\n{log}")
        if _serving(state["health_port"], "/readyz") and _serving(state["webhook_port"], None):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"lws-controller not ready on 127.0.0.1:{state['webhook_port']} after {timeout:.0f}s")
        time.sleep(0.25)


def running(kubeconfig: Path) -> list[int]:
    return processes.running(BINARY, kubeconfig)


def stop(kubeconfig: Path, timeout: float = 10) -> None:
    processes.stop(BINARY, kubeconfig, timeout)
