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


def _group(*conds: dict) -> dict:
    return {"metadata": {"generation": 1}, "status": {"conditions": list(conds)}}


def test_pods_gated_follows_the_release() -> None:
    from phalanx.owners.gating import gating_condition

    waiting = gating_condition(True, _group({"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}))
    assert (waiting["status"], waiting["reason"]) == ("True", "Gated")
    assert "until the group can be placed" in waiting["message"]
    for released in (
        {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Released"},
        {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"},
    ):
        lifted = gating_condition(True, _group(released))
        assert (lifted["status"], lifted["reason"]) == ("False", "GatesLifted")
        assert "until the group can be placed" not in lifted["message"]
    readmitted = gating_condition(True, _group({"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Pending"}))
    assert readmitted["status"] == "True", "a group torn down and admitted again is gated again"
    assert gating_condition(False, _group())["reason"] == "PodsNotGated"
