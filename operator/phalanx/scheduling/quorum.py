"""Devices held by gangs below quorum: the number gang scheduling exists to keep at 0.

A gang (a PodGroup with a gang policy, of an owner the loop schedules, not being deleted) is
*incomplete* when fewer than minCount of its live members (not terminal, not
terminating) are bound to a node or released onto one by Phalanx (pinned,
gate lifted), members that finished their work counted with them. Its *held devices* are the distinct devices allocated (not
adminAccess) to the claims its live members use. The gauge is the sum over
incomplete gangs, except a gang in the middle of a release: a reservation is
recorded and the group is not yet PodGroupInitiallyScheduled=True. Those
devices are reserved on purpose for the members about to bind, and the bind
deadline tears the group down if they do not.

So with disruptionMode `all` the value is 0 apart from the moment between a
member's loss and the teardown; with `single`, a gang that lost members and
runs below minCount counts here for as long as it holds its devices (the
article's preemption finding 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.scheduling import accessors, conditions, disruption


def mid_release(pod_group: Mapping[str, Any]) -> bool:
    return accessors.reservation(pod_group) is not None and not conditions.true(pod_group, keys.INITIALLY_SCHEDULED)


def held_devices(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], claim: Any) -> int:
    """Devices a gang below quorum holds (0 when it is not below quorum, is not a gang, or is mid-release).

    `pods`: every pod of its owner; `claim(namespace, name)` looks a ResourceClaim up."""
    if not accessors.gang(pod_group) or pod_group["metadata"].get("deletionTimestamp"):
        return 0
    pods = list(pods)
    live = [p for p in pods if accessors.live(p)]
    placed, min_count = sum(1 for p in live if accessors.placed_on(p) is not None), accessors.min_count(pod_group)
    if placed < min_count:  # only then the members done are counted (reading the record), as every gang's reads are derived
        placed += disruption.finished(pod_group, pods)
    if placed >= min_count or mid_release(pod_group):
        return 0
    devices = set()
    for pod in live:
        for name in accessors.holding_claim_names(pod):
            found = claim(pod["metadata"]["namespace"], name)
            if found is not None:
                devices.update(accessors.consuming_ids(found) or ())
    return len(devices)
