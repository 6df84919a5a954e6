"""promtool, built once from the Go module proxy and cached beside the other binaries: it checks the PrometheusRule's
expressions with Prometheus' own parser."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from phalanx_dev.localcluster.cluster import cache_dir

MODULE = "github.com/prometheus/prometheus"
VERSION = "v0.316.0"  # Prometheus 3.16 (the module's tags are v0.3XX for 3.XX)


def binary() -> Path:
    out = cache_dir() / "bin" / f"promtool-{VERSION}"
    path = out / "promtool"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            # remove_all_sd: Prometheus' own build tag that leaves out the service-discovery plugins (cloud SDKs),
            # which checking rules never uses; the build is minutes shorter.
            ["go", "install", "-trimpath", "-tags", "remove_all_sd", "-ldflags", "-s -w", f"{MODULE}/cmd/promtool@{VERSION}"],
            env=dict(os.environ, GOBIN=str(out)),
            check=True,
        )
    return path
