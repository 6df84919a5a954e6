"""The loop's CPU budget: no rest for a cycle now and then, a bounded share for a stream of them."""

from __future__ import annotations

import pytest

from phalanx.scheduling.pacing import MAX_REST, CpuBudget


def test_an_occasional_cycle_does_not_rest() -> None:
    budget = CpuBudget()
    assert budget.rest(now=100.0, spent=0.008) == 0.0
    assert budget.rest(now=101.0, spent=0.020) == 0.0, "a second later the budget has refilled"


def test_back_to_back_cycles_are_held_to_the_share() -> None:
    """Cycles of 30 ms CPU each, each starting as soon as the last rest ends: over a minute the loop spends about a
    third of the time in cycles, and the first cycles (the burst) rest nothing."""
    budget = CpuBudget(share=1 / 3, burst=0.1)
    now, busy, rests = 0.0, 0.0, []
    while now < 60.0:
        now += 0.030  # the cycle itself
        busy += 0.030
        rest = budget.rest(now, 0.030)
        rests.append(rest)
        now += rest
    assert rests[:3] == [0.0, 0.0, 0.0]
    assert busy / now == pytest.approx(1 / 3, rel=0.05)


def test_one_costly_cycle_rests_at_most_max_rest() -> None:
    budget = CpuBudget()
    assert budget.rest(now=5.0, spent=2.0) == MAX_REST
