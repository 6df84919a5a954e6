"""The pure core: given an immutable snapshot and a group, a whole-group plan or the reason there is none.

No API calls, no Kopf, no clock. `plan()` is the entry point; `model`
holds the input types, `nodes` the node filters, `pods` what other pods
allow (pod affinity, topology spread, host ports), `devices` DRA matching,
`placement` the search and the verdict types.
"""

from phalanx.planner.devices import DeviceMatcher, Result
from phalanx.planner.placement import ClaimPlan, Fits, Short, Shortage, plan

__all__ = ["ClaimPlan", "DeviceMatcher", "Fits", "Result", "Short", "Shortage", "plan"]
