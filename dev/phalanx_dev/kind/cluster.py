"""A Kind cluster of e2e/kind/cluster.sh as `phalanx demo --backend kind` drives it: kubectl run where the API server
is reached (on this machine's kind of host inside the Docker engine's network namespace, host.sh exec, where kind
publishes it on 127.0.0.1; on a machine with Docker of its own, directly); up, down and the operator's metrics (each
replica's, through the API server's pod proxy). The shell scripts stay the one way to make and remove the cluster;
this only calls them.

    KindCluster.of(repo)                                    e2e/kind/kind.yaml: the article's cluster, with Phalanx
    KindCluster.of(repo, "kind-upstream-gang.yaml", operator=False)   the comparison: the 1.37 gates, no Phalanx
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

OPERATOR_NAMESPACE = "phalanx-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=phalanx"
METRICS_PORT = 8000


def config_name(text: str) -> str:
    """The cluster's name in a Kind config (its top-level `name:`), as cluster.sh reads it."""
    match = re.search(r"^name:\s*(\S+)\s*$", text, re.MULTILINE)
    if match is None:
        raise ValueError("the Kind config names no cluster (no top-level `name:`)")
    return match.group(1)


class ReplicaMetrics(NamedTuple):
    """One operator replica's metrics exposition, or why its pod proxy gave none."""

    pod: str
    exposition: str
    error: str = ""


@dataclass(frozen=True)
class KindCluster:
    """One Kind cluster of cluster.sh, by its config; `operator` says whether up() installs Phalanx beside the driver."""

    repo: Path
    config: Path
    operator: bool = True

    @classmethod
    def of(cls, repo: Path, config: str = "kind.yaml", *, operator: bool = True) -> KindCluster:
        return cls(repo, repo / "e2e" / "kind" / config, operator)

    @property
    def name(self) -> str:
        return config_name(self.config.read_text())

    def script(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        """cluster.sh with this config; its progress goes to the terminal unless captured."""
        env = {**os.environ, "KIND_CONFIG": str(self.config)}
        command = [str(self.repo / "e2e" / "kind" / "cluster.sh"), *args]
        return subprocess.run(command, env=env, text=True, check=True, stdout=subprocess.PIPE if capture else None)

    @cached_property
    def kubeconfig(self) -> Path:
        return Path(self.script("kubeconfig", capture=True).stdout.strip())

    @cached_property
    def _kubectl_binary(self) -> str:
        return self.script("kubectl-path", capture=True).stdout.strip()

    @cached_property
    def _where(self) -> list[str]:
        """What runs a command where the API server is reached: cluster.sh's mode, asked once (each call of
        `cluster.sh exec` would ask Docker again)."""
        local = self.script("mode", capture=True).stdout.strip() == "local"
        return [str(self.repo / "e2e" / "kind" / "host.sh"), "exec"] if local else []

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [*self._where, self._kubectl_binary, "--kubeconfig", str(self.kubeconfig), *args]
        return subprocess.run(command, input=stdin, text=True, capture_output=True, check=check)

    def exists(self) -> bool:
        return self.kubeconfig.exists()

    def answers(self) -> bool:
        if not self.exists():
            return False
        return self.kubectl("get", "--raw", "/readyz", "--request-timeout=5s", check=False).returncode == 0

    def operator_running(self) -> bool:
        """The operator's Deployment has a replica available (cluster.sh install rolled it out)."""
        out = self.kubectl("-n", OPERATOR_NAMESPACE, "get", "deployment", "phalanx", "-o", "json", check=False)
        return out.returncode == 0 and json.loads(out.stdout).get("status", {}).get("availableReplicas", 0) > 0

    def up(self) -> None:
        """Create the cluster (and the Docker engine) if missing, then the driver's chart, and the operator if asked."""
        self.script("up")
        self.script("install" if self.operator else "install-driver")

    def down(self) -> None:
        """Delete this cluster; the Docker engine and its namespace go too when no other Kind cluster is left."""
        self.script("delete")

    def metrics(self) -> list[ReplicaMetrics]:
        """Each operator replica's metrics, read through the API server's pod proxy."""
        pods = self.kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-l", OPERATOR_SELECTOR, "-o", "json")
        out = []
        for pod in json.loads(pods.stdout)["items"]:
            name = pod["metadata"]["name"]
            path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{name}:{METRICS_PORT}/proxy/metrics"
            raw = self.kubectl("get", "--raw", path, check=False)
            out.append(ReplicaMetrics(name, raw.stdout, "") if raw.returncode == 0 else ReplicaMetrics(name, "", raw.stderr.strip()))
        return out
