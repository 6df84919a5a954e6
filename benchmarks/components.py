"""CPU seconds spent by each process of the bench's local clusters, by cluster and role, read from /proc.

A burst saturates this machine's cores, so a way's rate is the cores over the CPU each gang costs every process
on the machine: its own cluster's API server, etcd, controllers and kwok, the operator, the bench's client, and
the other cluster idling beside it (5,000 kwok nodes keep an API server busy with nothing scheduled). A rate moves
from run to run with what else runs; what each component spent per gang says where a gap is.

    before = components.cpu(operator_pid)
    ...
    spent = components.spent(before, components.cpu(operator_pid))   # {"bench-phalanx/apiserver": 135.2, ...}
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROLES = {
    "kube-apiserver": "apiserver",
    "etcd": "etcd",
    "kube-controller-manager": "kcm",
    "kube-scheduler": "scheduler",
    "kwok-controller": "kwok",
}
"""The binaries kwokctl runs from each cluster's own `clusters/NAME/bin/`, by the role they are reported under."""

_BINARY = re.compile(r"/clusters/([^/]+)/bin/([\w.-]+)$")


def _seconds(pid: int | str) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu(operator_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far of every cluster component (as "CLUSTER/ROLE"), the operator and this process ("bench")."""
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            match = _BINARY.search(argv0)
            if match is None or match.group(2) not in ROLES:
                continue
            key = f"{match.group(1)}/{ROLES[match.group(2)]}"
            out[key] = out.get(key, 0.0) + _seconds(entry.name)
        except OSError:  # gone meanwhile
            continue
    if operator_pid is not None:
        out["operator"] = _seconds(operator_pid)
    out["bench"] = _seconds(os.getpid())
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each component spent between two readings, largest first (a process started meanwhile counts
    from zero, one gone meanwhile is left out)."""
    moved = {key: round(after[key] - before.get(key, 0.0), 1) for key in after}
    return dict(sorted(moved.items(), key=lambda kv: -kv[1]))
