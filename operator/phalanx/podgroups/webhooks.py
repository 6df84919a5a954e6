"""The webhooks for labelled pods and for users' PodGroups, served by Kopf, decided by `podgroups.admission`.

Its configuration's objectSelector sends it only pods that carry the
pod-group label (`podgroups.webhook_rules`), so no other pod waits for Phalanx;
for those it fails closed: a labelled pod admitted ungated would run alone.
The group is read from the API server, not the informers' cache: a PodGroup
created a moment before its pods may not have reached the cache yet.
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api.intent import GangSpecError
from phalanx.api.keys import GROUP, VERSION
from phalanx.kube.client import custom_path
from phalanx.owners.webhooks import merge_into
from phalanx.podgroups import admission
from phalanx.podgroups.webhook_rules import MUTATE_ID, VALIDATE_ID
from phalanx.scheduling import composites


@kopf.on.mutate("", "v1", "pods", id=MUTATE_ID, operations=["CREATE"])
async def gate_member(body: Any, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    pod = dict(body)
    try:
        name = admission.group_name(pod)
        namespace = pod["metadata"]["namespace"]
        pod_group = await memo.kube.get(custom_path("podgroups", namespace, name))
        parent = composites.parent(pod_group) if pod_group is not None else None
        composite = await memo.kube.get(custom_path("compositepodgroups", namespace, parent)) if parent is not None else None
        mutation = admission.mutate_pod(pod, pod_group, composite)
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None
    merge_into(patch, mutation.patch)
    warnings.extend(mutation.warnings)


@kopf.on.validate(GROUP, VERSION, "podgroups", id=VALIDATE_ID, operations=["CREATE", "UPDATE"])
def validate_group(body: Any, old: Any, **_: Any) -> None:
    """Only a user's PodGroup whose annotations under our prefix change gets here (the configuration's match
    condition)."""
    try:
        admission.validate_group(dict(body), dict(old) if old is not None else None)
    except GangSpecError as exc:
        raise kopf.AdmissionError(str(exc), code=exc.code) from None
