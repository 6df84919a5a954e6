"""What one scheduling cycle's actions share: begun afresh by the loop each cycle (`Cycle.begin`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cycle:
    """The state of the cycle under way, which the driver and its actions read and set."""

    seq: int = 0
    """The last mark (`hints.Hints.seq`) as this cycle read its groups and their pods: a memo a visit sets is as old
    as that, so a write that lands during the visit is newer than it."""
    woken_for: float = 0.0
    """When the oldest change this cycle runs for arrived (monotonic): a release's steps count from it."""
    again: bool = False
    """A release was held back for a group ahead that fits: the next cycle runs at once, and releases it."""
    deposed: bool = False
    """A release or reconcile this cycle found another replica's record: the cycle touches no other group."""
    passed: int = 0
    """Waiting groups this cycle passed over, counted into the metric as the cycle ends."""
    settled: int = 0
    """Running gangs this cycle passed over, counted into the metric as the cycle ends."""
    preempted: dict[str, str] = field(default_factory=dict)
    """Pod uid -> the cause of its loss, for the victims of every preemption under way (from the nominations)."""

    def begin(self, seq: int) -> None:
        """A new cycle, its groups read as of mark `seq`: nothing held back, deposed or passed over yet."""
        self.seq, self.again, self.deposed, self.passed, self.settled = seq, False, False, 0, 0
