"""PodGroup status conditions: pure updates in the metav1.Condition convention."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.api import times
from phalanx.api.keys import INITIALLY_SCHEDULED


def condition(type_: str, status: bool, reason: str, message: str, generation: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": times.stamp(),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def find(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """The object's `status.conditions` entry of this type (PodGroup, Job, pod alike), or None."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def true(obj: Mapping[str, Any], type_: str) -> bool:
    return (find(obj, type_) or {}).get("status") == "True"


def merged(existing: list[dict[str, Any]], new: dict[str, Any], *, readmit: bool = False) -> list[dict[str, Any]] | None:
    """The condition list with `new` in it, or None when nothing changes.

    The transition time moves only when the status does, and a True
    PodGroupInitiallyScheduled is terminal, as upstream, except when the
    whole group was torn down (`readmit`): its new pods must be admitted as a
    unit again, which a group that still says Scheduled would not be.
    """
    out, found = [], False
    for cond in existing:
        if cond["type"] != new["type"]:
            out.append(cond)
            continue
        found = True
        if cond["type"] == INITIALLY_SCHEDULED and cond["status"] == "True" and not readmit:
            return None
        if all(cond.get(k) == new.get(k) for k in ("status", "reason", "message", "observedGeneration")):
            return None
        if cond["status"] == new["status"]:
            new = dict(new, lastTransitionTime=cond["lastTransitionTime"])
        out.append(new)
    if not found:
        out.append(new)
    return out
