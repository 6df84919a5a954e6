"""Whether a toleration tolerates a taint: core/v1's `ToleratesTaint`, for node taints and device taints alike.

An empty operator is `Equal`, and an empty key matches every key, as upstream;
one predicate for the node filter and the device allocator, so a pod and its
claims are never judged by two readings of the same toleration.
"""

from __future__ import annotations

from collections.abc import Iterable

from phalanx.planner.model import Taint, Toleration


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key and t.key != taint.key:
            continue
        if t.operator == "Exists" or (t.operator in ("", "Equal") and t.value == taint.value):
            return True
    return False
