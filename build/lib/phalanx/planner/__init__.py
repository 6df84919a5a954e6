"""The pure core: given an immutable snapshot and a group, a whole-group plan or the reason there is none.

No API calls, no Kopf, no clock. `plan()` is the entry point; `model`
holds the input types, `nodes` the node filters, `pods` what other pods
allow (pod affinity, topology spread, host ports), `cel` selectors and
their cost limit, `devices` selector matching, `allocator` the structured
allocator's device search, `extended` the devices kube-scheduler gives a
pod's extended resources a DeviceClass serves, `placement` the search and the verdict types,
`preemption` which lower-priority victims must go for a group to fit.
"""

from phalanx.planner.allocator import Result
from phalanx.planner.devices import DeviceMatcher
from phalanx.planner.model import Victim, VictimPod
from phalanx.planner.placement import ClaimPlan, Fits, Short, Shortage, plan
from phalanx.planner.preemption import NoVictims, Preemption, plan_preemption

__all__ = [
    "ClaimPlan",
    "DeviceMatcher",
    "Fits",
    "NoVictims",
    "Preemption",
    "Result",
    "Short",
    "Shortage",
    "Victim",
    "VictimPod",
    "plan",
    "plan_preemption",
]
