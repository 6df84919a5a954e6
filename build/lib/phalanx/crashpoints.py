"""Named crash points: a test seam that kills the operator at one exact step, so the fault suite can prove recovery.

`crash_point("reserve.after-record")` does nothing unless the environment
variable PHALANX_CRASH_AT names that point, as `NAME` or `NAME:N` (die at
the Nth hit; the first by default). Then the process SIGKILLs itself: no
`finally`, no cleanup, no flush beyond the log line written first, exactly
what a node failure or an OOM kill leaves behind. Never set in production.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

ENV = "PHALANX_CRASH_AT"
_hits: Counter[str] = Counter()


def _target() -> tuple[str, int] | None:
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    name, _, nth = raw.partition(":")
    return name, int(nth or 1)


def crash_point(name: str) -> None:
    """SIGKILL this process when PHALANX_CRASH_AT names `name` and this is its Nth hit; a no-op otherwise."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] += 1
    if _hits[name] < target[1]:
        return
    sys.stderr.write(f"phalanx: crash point {name} hit ({_hits[name]}), killing myself\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
