"""What the loop reads across every group's record each cycle (`Memory.summary`), summed once per state of them."""

from __future__ import annotations

import math

from phalanx.scheduling import memory


def test_the_summary_is_summed_again_once_a_record_is_written_and_only_then() -> None:
    remembered = memory.Memory(counts_every=1.0)
    a, b = remembered.of("a"), remembered.of("b")
    first = remembered.summary()
    assert (first.wake, first.due, first.backoffs, dict(first.quorum_at), first.quiet) == (math.inf, math.inf, (), {}, False)
    a.since = 7
    assert remembered.summary() is first, "a memo's mark is nothing the summary reads"

    a.due = 50.0
    b.backoff = (20.0, 1.0)
    b.quorum_at = 3.0
    b.counts_at, b.counts_due, b.met_at = 5.0, True, 0.0
    a.quiet = object()  # type: ignore[assignment]
    now = remembered.summary()
    assert (now.wake, now.due, now.backoffs, dict(now.quorum_at), now.quiet) == (6.0, 50.0, (("b", 20.0),), {"b": 3.0}, True)
    remembered.of("a")
    assert remembered.summary() is now, "a record looked up is not written"
    b.backoff, b.counts_due = b.backoff, True
    a.settled = True
    assert remembered.summary() is now, "a field set to what it holds, or a memo no summary reads, is no write"

    remembered.keep_only({"a"})
    gone = remembered.summary()
    assert (gone.wake, gone.backoffs, dict(gone.quorum_at)) == (50.0, (), {}), "b's record went with its group"


def test_counts_due_of_a_group_met_just_now_wake_the_loop_once_it_may_write_them() -> None:
    remembered = memory.Memory(counts_every=1.0, quiet_for=10.0)
    fresh = remembered.of("fresh")
    fresh.met_at, fresh.counts_due = 100.0, True
    assert remembered.summary().wake == 110.0, "not before the quiet time since the loop met it"
    fresh.counts_at = 109.5
    assert remembered.summary().wake == 110.5, "nor sooner than the interval after its last write"
