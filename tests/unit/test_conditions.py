"""PodGroupInitiallyScheduled: terminal once True, except when the whole group was torn down and must be admitted again."""

from __future__ import annotations

from phalanx.api import keys
from phalanx.scheduling.conditions import condition, merged


def test_scheduled_is_terminal() -> None:
    scheduled = condition(keys.INITIALLY_SCHEDULED, True, "Scheduled", "4 of 4 bound")
    assert merged([scheduled], condition(keys.INITIALLY_SCHEDULED, False, "Pending", "waiting")) is None


def test_a_torn_down_group_is_admitted_again() -> None:
    scheduled = condition(keys.INITIALLY_SCHEDULED, True, "Scheduled", "4 of 4 bound")
    torn = condition(keys.INITIALLY_SCHEDULED, False, "GangTornDown", "device held twice")
    (out,) = merged([scheduled], torn, readmit=True) or []
    assert (out["status"], out["reason"]) == ("False", "GangTornDown")


def test_the_transition_time_moves_only_with_the_status() -> None:
    old = dict(condition(keys.INITIALLY_SCHEDULED, False, "Pending", "1 of 4"), lastTransitionTime="2026-01-01T00:00:00Z")
    (out,) = merged([old], condition(keys.INITIALLY_SCHEDULED, False, "Unschedulable", "short")) or []
    assert out["lastTransitionTime"] == "2026-01-01T00:00:00Z" and out["reason"] == "Unschedulable"
