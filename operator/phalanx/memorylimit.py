"""How close this replica is to its memory limit, as a metric: so it says so before the kernel kills it.

The operator's memory grows with the cluster (its informers hold every pod,
node, claim and slice; README "Performance" has the curve), and both replicas
hold the same, so both reach a limit set too low together: no leader, and
webhooks that refuse every gang Job. `phalanx_memory_limit_used_ratio` is the
resident memory over the container's limit, read from its cgroup (v2
`memory.max`, else v1 `memory.limit_in_bytes`) on each scrape; NaN without a
limit, so no alert compares true. The PrometheusRule under manifests/monitoring
warns at 85% for 5 minutes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from prometheus_client import Gauge

CGROUP = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 62
"""cgroup v1 reports no limit as a number near 2^63 (rounded down to the page size)."""


def limit_bytes(root: Path = CGROUP) -> int | None:
    """The container's memory limit, or None when it has none (or no cgroup file can be read)."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        value = int(text)
        return None if value >= UNLIMITED else value
    return None


def resident_bytes(statm: Path = Path("/proc/self/statm")) -> int:
    """This process's resident memory (what `process_resident_memory_bytes` reports)."""
    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def used_ratio(root: Path = CGROUP, statm: Path = Path("/proc/self/statm")) -> float:
    limit = limit_bytes(root)
    return resident_bytes(statm) / limit if limit else math.nan


LIMIT = Gauge("phalanx_memory_limit_bytes", "The container's memory limit, from its cgroup (NaN: none).")
LIMIT.set_function(lambda: float(limit_bytes() or math.nan))
USED = Gauge(
    "phalanx_memory_limit_used_ratio",
    "Resident memory over the container's memory limit (NaN: no limit); at 1 the kernel kills the replica.",
)
USED.set_function(used_ratio)
