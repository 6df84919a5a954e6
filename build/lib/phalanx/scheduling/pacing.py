"""How long the scheduling loop rests after a cycle: a share of a core on average, with room for a burst.

A stream of watch changes (thousands of pods starting) would run cycles back to
back, each walking every pod. A fixed rest after every cycle bounds that, but
also delays the one cycle that matters on a quiet cluster: the one that sees a
gang's quorum. A CPU budget refilled at `share` of a core, holding at most
`burst` CPU seconds, rests only once the loop has spent more than its share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SHARE = 1 / 3
"""The part of a core the loop's cycles may use over time."""
BURST = 0.1
"""CPU seconds of cycles that may run back to back before the loop rests."""
MAX_REST = 1.0
"""The longest rest: a costly cycle delays the next one by at most this."""


@dataclass
class CpuBudget:
    share: float = SHARE
    burst: float = BURST
    credit: float = field(init=False)
    at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.credit = self.burst

    def rest(self, now: float, spent: float) -> float:
        """Seconds to rest after a cycle that ended at `now` (monotonic) having spent `spent` CPU seconds."""
        if self.at is not None:
            self.credit = min(self.burst, self.credit + (now - self.at) * self.share)
        self.at = now
        self.credit -= spent
        return min(MAX_REST, max(0.0, -self.credit / self.share))
