"""Kubernetes' own structured DRA allocator as a test oracle: a Go program in allocator/, built once and kept running.

The program imports k8s.io/dynamic-resource-allocation v0.37.2 (the allocator
kube-scheduler v1.37.2 runs) and answers one JSON line per case. It is built
from the Go module proxy like the control plane, into the same cache
(~/.cache/phalanx/bin), keyed by Kubernetes version and a hash of its
sources, so an edit rebuilds it and nothing else does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from phalanx_dev.localcluster.cluster import KUBE_VERSION, cache_dir

SOURCE = Path(__file__).parent / "allocator"


def _go() -> str:
    """Go from PATH, or the toolchain build-kube.sh fetched into the cache on a machine without one."""
    found = shutil.which("go")
    if found:
        return found
    for toolchain in sorted((cache_dir() / "toolchain").glob("go*/bin/go"), reverse=True):
        return str(toolchain)
    raise RuntimeError("no Go toolchain: install Go, or run `./task build` once (it fetches one into the cache)")


def binary() -> Path:
    """Build (once per version and source) and return the oracle's path."""
    digest = hashlib.sha256(b"".join((SOURCE / name).read_bytes() for name in ("go.mod", "go.sum", "main.go"))).hexdigest()[:12]
    target = cache_dir() / "bin" / f"dra-oracle-{KUBE_VERSION}-{digest}" / "allocator"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    partial = target.with_suffix(".tmp")
    subprocess.run([_go(), "build", "-trimpath", "-o", str(partial), "."], cwd=SOURCE, env=env, check=True)
    partial.rename(target)
    return target


class Upstream:
    """One long-running oracle process: `allocate` and `validate` are one round trip each."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([str(binary())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def _ask(self, case: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(case) + "\n")
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the oracle exited ({self._proc.poll()})")
        answer = json.loads(line)
        if answer.get("problem"):
            raise ValueError(f"the oracle refused the case: {answer['problem']}")
        return answer

    def allocate(self, world: dict[str, Any], claims: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Per node: {"ok", "error", "fatal", "allocations"} for allocating `claims` (one pod's) there."""
        return self._ask({"mode": "allocate", **world, "claims": claims})["nodes"]

    def validate(self, world: dict[str, Any], claims: list[dict[str, Any]], node: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        """Whether upstream accepts `results` (one AllocationResult per claim) for `claims` on `node`."""
        return self._ask({"mode": "validate", **world, "claims": claims, "node": node, "results": results})

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=10)
