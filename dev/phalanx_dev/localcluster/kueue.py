"""Kueue's own controller manager beside the local control plane, for quota in front of Phalanx's gangs.

The manager is the release built from the Go module proxy (`build-kube.sh` with
PHALANX_KUEUE=1), run as a process on the host like JobSet's (`jobset`), with
the CRDs and the webhook configurations of that same release. Its webhooks
serve on loopback with a certificate made here (its internal cert rotation
needs a Service and a Secret it would reach through a cluster network there is
none of, so the Configuration turns it off), and the configurations point at
that address by URL. Only the webhooks of what this Configuration runs are
installed: Kueue's own kinds and `batch/job` (a webhook for an integration
that is off is never served, and with failurePolicy Fail it would refuse every
pod, Deployment or StatefulSet).

The Configuration (`controller_config`): the `batch/job` integration only;
`manageJobsWithoutQueueName: false`, so a Job without the
`kueue.x-k8s.io/queue-name` label is none of Kueue's business; quota on DRA
devices through Kueue's own `DynamicResourceAllocation` gate (alpha in
v0.17, no Kubernetes gate): the DeviceClass `gpu.example.com` counts as the
resource `GPU_RESOURCE` in a ClusterQueue's quota; and `waitForPodsReady`
(README, "Behind Kueue": Kueue's, not Phalanx's ready deadline, owns "the gang
came up", since only its eviction gives the quota back). The visibility
server (an aggregated API it would serve on its own port) is off.

The process is found through /proc by the cluster's kubeconfig in its
environment, as JobSet's is, so `stop` works from any process.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from phalanx.kube import tls
from phalanx_dev.localcluster import processes

VERSION = "v0.17.0"
BINARY = "kueue-controller-manager"
API_GROUP = "kueue.x-k8s.io"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "example.com/gpu"
"""What a ClusterQueue's quota calls the driver's devices (`deviceClassMappings`)."""
DEVICE_CLASS = "gpu.example.com"
CRDS = ("clusterqueues", "localqueues", "resourceflavors", "workloads", "workloadpriorityclasses")
_SERVED_PATHS = ("-kueue-x-k8s-io-", "-batch-v1-job")
"""The webhooks kept: Kueue's own kinds' and batch/job's, the only integration this Configuration enables."""


@dataclass(frozen=True)
class PodsReady:
    """Kueue's waitForPodsReady: an admitted workload whose pods are not all Ready within `timeout` seconds is
    evicted (suspended) and requeued after a back-off of `backoff_base` seconds, doubling up to `backoff_max`."""

    timeout: int = 600
    backoff_base: int = 60
    backoff_max: int = 3600


DOCUMENTED = PodsReady()
"""The setting README's "Behind Kueue" recommends: a timeout above Phalanx's hold-after (300 s), so a gang waiting at
the head of Phalanx's line gets its devices held for it before Kueue gives up on it."""


class Exited(RuntimeError):
    """The manager stopped before it was ready (a port taken between choosing it and binding it, among others)."""


def webhook_configurations(release: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhooks this Configuration serves, at `url`, trusting `ca_pem`."""
    documents = [doc for doc in yaml.safe_load_all((release / "webhooks.yaml").read_text()) if doc]
    bundle = base64.b64encode(ca_pem).decode()
    for doc in documents:
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        hooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if any(served in path for served in _SERVED_PATHS):
                hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
                hooks.append(hook)
        doc["webhooks"] = hooks
    return documents


def controller_config(webhook_port: int, health_port: int, cert_dir: Path, pods_ready: PodsReady | None) -> dict[str, Any]:
    """One manager per cluster, so no leader election; no metrics server (nothing scrapes it here)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "resources": {"deviceClassMappings": [{"name": GPU_RESOURCE, "deviceClassNames": [DEVICE_CLASS]}]},
        "featureGates": {"DynamicResourceAllocation": True, "VisibilityOnDemand": False},
    }
    if pods_ready is not None:
        config["waitForPodsReady"] = {
            "timeout": f"{pods_ready.timeout // 60}m" if pods_ready.timeout % 60 == 0 else f"{pods_ready.timeout}s",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": pods_ready.backoff_base,
                "backoffMaxSeconds": pods_ready.backoff_max,
            },
        }
    return config


def start(
    release: Path, cluster_dir: Path, kubeconfig: Path, ports: tuple[int, int], pods_ready: PodsReady | None = DOCUMENTED
) -> tuple[int, list[dict[str, Any]]]:
    """Start the manager (in its own process group, logging to kueue/controller.log); return its pid and the
    webhook configurations to apply once it is ready."""
    webhook_port, health_port = ports
    home = cluster_dir / "kueue"
    cert = tls.generate(home / "certs", ["127.0.0.1"])
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump(controller_config(webhook_port, health_port, cert.cert_file.parent, pods_ready)))
    (home / "state.json").write_text(json.dumps({"health_port": health_port}))
    # the metrics certificate it insists on reading even with no metrics server (build-kube.sh's one-line overlay)
    env = dict(os.environ, KUEUE_METRICS_CERT_DIR=str(cert.cert_file.parent))
    argv = [str(release / BINARY), f"--config={config}", f"--kubeconfig={kubeconfig}"]
    pid = processes.start(argv, kubeconfig, home / "controller.log", env=env)
    return pid, webhook_configurations(release, f"https://127.0.0.1:{webhook_port}", cert.ca_pem)


def wait_ready(cluster_dir: Path, kubeconfig: Path, timeout: float = 120) -> None:
    """Its readiness probe answers only once the webhook server is serving, which is what admission needs."""
    port = json.loads((cluster_dir / "kueue" / "state.json").read_text())["health_port"]
    deadline = time.monotonic() + timeout
    while True:
        if not running(kubeconfig):
            log = (cluster_dir / "kueue" / "controller.log").read_text(errors="replace")[-3000:]
            raise Exited(f"{BINARY} exited; the end of its log:\n{log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{BINARY} not ready on 127.0.0.1:{port} after {timeout:.0f}s")
        time.sleep(0.25)


def running(kubeconfig: Path) -> list[int]:
    return processes.running(BINARY, kubeconfig)


def stop(kubeconfig: Path, timeout: float = 10) -> None:
    processes.stop(BINARY, kubeconfig, timeout)
