"""What a waiting group's visit reads, by version (`scheduling/quiet.py`): any change to it is a new visit."""

from __future__ import annotations

import copy
from typing import Any

from phalanx.scheduling import quiet

GROUP = {"metadata": {"namespace": "ml", "name": "g", "uid": "g", "resourceVersion": "7"}, "spec": {}}
POD = {
    "metadata": {"namespace": "ml", "name": "g-0", "uid": "p0", "resourceVersion": "10"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
    "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "g-0-gpu"}]},
}
CLAIM = {"metadata": {"namespace": "ml", "name": "g-0-gpu", "uid": "c0", "resourceVersion": "11"}}


def _claims(*objs: dict[str, Any]) -> Any:
    by_key = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}
    return lambda namespace, name: by_key.get((namespace, name))


def test_the_same_objects_read_the_same_and_any_new_version_differs() -> None:
    seen = quiet.inputs(GROUP, [POD], _claims(CLAIM), 100)
    assert seen is not None and seen == quiet.inputs(copy.deepcopy(GROUP), [copy.deepcopy(POD)], _claims(copy.deepcopy(CLAIM)), 100)
    for changed in ("group", "pod", "claim"):
        group, pod, claim = copy.deepcopy(GROUP), copy.deepcopy(POD), copy.deepcopy(CLAIM)
        {"group": group, "pod": pod, "claim": claim}[changed]["metadata"]["resourceVersion"] = "99"
        assert quiet.inputs(group, [pod], _claims(claim), 100) != seen, changed
    assert quiet.inputs(GROUP, [POD], _claims(CLAIM), 1000) != seen, "its priority"
    assert quiet.inputs(GROUP, [POD], _claims(), 100) != seen, "its claim gone"
    second = copy.deepcopy(POD)
    second["metadata"].update(name="g-1", uid="p1")
    second["status"] = {}
    assert quiet.inputs(GROUP, [POD, second], _claims(CLAIM), 100) != seen, "a member more"


def test_an_object_without_a_version_is_never_taken_as_unchanged() -> None:
    made_by_hand = copy.deepcopy(POD)
    del made_by_hand["metadata"]["resourceVersion"]
    assert quiet.inputs(GROUP, [made_by_hand], _claims(CLAIM), 100) is None


def test_a_group_with_claims_of_its_own_is_always_visited() -> None:
    assert quiet.memoizable(GROUP)
    assert not quiet.memoizable({**GROUP, "spec": {"resourceClaims": [{"name": "shared"}]}})
