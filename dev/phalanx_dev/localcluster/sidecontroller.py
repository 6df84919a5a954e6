"""A sigs.k8s.io controller run beside the local control plane: JobSet's (`jobset`), LeaderWorkerSet's (`lws`).

Each is its release built from the Go module proxy (`build-kube.sh`), run as a
process on the host like the control plane's own, with the CRDs and the webhook
configurations of that same release. Its webhooks serve on loopback with a
certificate made here (its own cert rotation needs a Service and a Secret it
would reach through a cluster network there is none of), and the
configurations point at that address by URL; the pod webhooks get the
objectSelector upstream's kustomize overlay gives them, so pods that are not
the kind's never wait for it.

The process is found through /proc by the cluster's kubeconfig in its
environment, as the driver's plugins are, so `stop` works from any process.
"""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phalanx.kube import tls
from phalanx_dev.localcluster import processes

_POD_WEBHOOKS = {"mpod.kb.io", "vpod.kb.io"}


class Exited(RuntimeError):
    """The controller stopped before it was ready (a port taken between choosing it and binding it, among others)."""


def _serving(port: int, path: str | None) -> bool:
    """The port answers: an HTTP 200 at `path`, or (None) a TCP connection."""
    try:
        if path is None:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class SideController:
    home: str
    """Its directory under the cluster's (config, certificate, log) and its webhook configurations' prefix."""
    binary: str
    config_api_version: str
    pod_label: str
    """The label every pod of the kind carries: its pod webhooks are sent only those."""

    def webhook_configurations(self, release: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
        """The release's webhook configurations, served at `url` and trusting `ca_pem`; pods of another kind are not sent."""
        documents = [doc for doc in yaml.safe_load_all((release / "webhooks.yaml").read_text()) if doc]
        bundle = base64.b64encode(ca_pem).decode()
        for doc in documents:
            doc["metadata"]["name"] = f"{self.home}-{doc['metadata']['name']}"
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
                if hook["name"] in _POD_WEBHOOKS:
                    hook["objectSelector"] = {"matchExpressions": [{"key": self.pod_label, "operator": "Exists"}]}
        return documents

    def controller_config(self, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
        """One controller per cluster, so no leader election; no metrics server (nothing scrapes it here)."""
        return {
            "apiVersion": self.config_api_version,
            "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }

    def start(self, release: Path, cluster_dir: Path, kubeconfig: Path, ports: tuple[int, int]) -> tuple[int, list[dict[str, Any]]]:
        """Start the controller (in its own process group, logging to <home>/controller.log); return its pid and the
        webhook configurations to apply once it is ready."""
        webhook_port, health_port = ports
        home = cluster_dir / self.home
        cert = tls.generate(home / "certs", ["127.0.0.1"])
        config = home / "config.yaml"
        config.write_text(yaml.safe_dump(self.controller_config(webhook_port, health_port, cert.cert_file.parent)))
        (home / "state.json").write_text(json.dumps({"health_port": health_port, "webhook_port": webhook_port}))
        argv = [str(release / self.binary), f"--config={config}", f"--kubeconfig={kubeconfig}"]
        pid = processes.start(argv, kubeconfig, home / "controller.log")
        return pid, self.webhook_configurations(release, f"https://127.0.0.1:{webhook_port}", cert.ca_pem)

    def wait_ready(self, cluster_dir: Path, kubeconfig: Path, timeout: float = 120) -> None:
        """Its readiness probe, then its webhook port: admission needs the webhook server, and LWS's probe answers
        before that server listens (JobSet's only once it does)."""
        home = cluster_dir / self.home
        state = json.loads((home / "state.json").read_text())
        deadline = time.monotonic() + timeout
        while True:
            if not self.running(kubeconfig):
                log = (home / "controller.log").read_text(errors="replace")[-3000:]
                raise Exited(f"{self.binary} exited; the end of its log:\n{log}")
            if _serving(state["health_port"], "/readyz") and _serving(state["webhook_port"], None):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.binary} not ready on 127.0.0.1:{state['webhook_port']} after {timeout:.0f}s")
            time.sleep(0.25)

    def running(self, kubeconfig: Path) -> list[int]:
        return processes.running(self.binary, kubeconfig)

    def stop(self, kubeconfig: Path, timeout: float = 10) -> None:
        processes.stop(self.binary, kubeconfig, timeout)
