"""LeaderWorkerSets as gangs, without a cluster: admission (the LWS's rules, its pods gated), a source per replica,
and the seam finding each replica's members by LWS's labels."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.kinds import KINDS
from phalanx.leaderworkersets import admission, objects
from phalanx.leaderworkersets.owner import LEADERWORKERSETS
from phalanx.owners.objects import pod_group
from phalanx.scheduling import accessors
from phalanx.scheduling.phase import OwnerState


def lws(replicas: int = 2, size: int = 3, annotations: dict[str, str] | None = None, **spec: Any) -> dict:
    return {
        "apiVersion": admission.API_VERSION,
        "kind": admission.KIND,
        "metadata": {"name": "serve", "namespace": "ml", "uid": "lws-uid", "annotations": annotations or {}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {}}}, **spec},
    }


GANG = {keys.POLICY: "gang"}


def pod(name: str, replica: int, worker: int, owner: str = "StatefulSet", lws_name: str = "serve") -> dict:
    labels = {admission.NAME_LABEL: lws_name, admission.GROUP_INDEX_LABEL: str(replica), admission.WORKER_INDEX_LABEL: str(worker)}
    ref = {"apiVersion": "apps/v1", "kind": owner, "name": "s", "uid": "s", "controller": True}
    return {"metadata": {"name": name, "namespace": "ml", "uid": name, "labels": labels, "ownerReferences": [ref]}, "spec": {}}


def test_each_replica_is_a_source_of_its_own_sized_by_the_leader_and_its_workers() -> None:
    sources = objects.from_lws(lws(2, 3, GANG))
    assert sources is not None and [s.min_count for s in sources] == [3, 3]
    names = {(s.workload_name, s.pod_group_name) for s in sources}
    assert len(names) == 2 and all(w.startswith(f"serve-{i}-") for i, (w, _) in enumerate(sorted(names)))
    assert [s.own_labels() for s in sources] == [{admission.GROUP_INDEX_LABEL: "0"}, {admission.GROUP_INDEX_LABEL: "1"}]
    assert all(s.owner_reference()["kind"] == "LeaderWorkerSet" and s.owner_reference()["name"] == "serve" for s in sources)
    assert objects.from_lws(lws(2, 3)) is None, "no gang asked"
    fewer = objects.from_lws(lws(1, 4, {keys.MIN_COUNT: "2", keys.POLICY: "gang"}))
    assert fewer is not None and [s.min_count for s in fewer] == [2]


def test_a_rolling_updates_surge_replicas_get_groups_too() -> None:
    rolling = {"rollingUpdateConfiguration": {"maxSurge": "50%"}}
    assert admission.groups(lws(3, 2, GANG, rolloutStrategy=rolling)) == 5, "50% of 3, rounded up"
    assert admission.groups(lws(2, 2, GANG, rolloutStrategy={"rollingUpdateConfiguration": {"maxSurge": 5}})) == 4, "capped"
    assert admission.groups(lws(2, 2, GANG)) == 2
    assert len(objects.from_lws(lws(3, 2, GANG, rolloutStrategy=rolling)) or []) == 5


def test_a_replicas_pods_are_its_groups_members_and_no_one_elses() -> None:
    sources = objects.from_lws(lws(2, 3, GANG)) or []
    groups = [pod_group(s, "w-uid").wire() for s in sources]
    for g in groups:
        g["metadata"]["uid"] = g["metadata"]["name"]
    pods = [pod("serve-0", 0, 0), pod("serve-0-1", 0, 1), pod("serve-1", 1, 0), pod("serve-1-1", 1, 1)]
    strays = [pod("copied", 0, 2, owner="Job"), pod("other", 0, 1, lws_name="other")]
    members = accessors.pods_by_group(groups, [*pods, *strays], KINDS)
    assert [[p["metadata"]["name"] for p in members[g["metadata"]["uid"]]] for g in groups] == [
        ["serve-0", "serve-0-1"],
        ["serve-1", "serve-1-1"],
    ]
    assert all(KINDS.of(g) is LEADERWORKERSETS for g in groups)
    assert KINDS.ref(groups[1])["metadata"] == {"name": "serve", "namespace": "ml", "uid": "lws-uid"}
    assert KINDS.owner_uid(pods[0]) is None, "a pod is controlled by a StatefulSet, no LWS"
    assert sorted([pods[1], pods[0]], key=KINDS.member_order)[0]["metadata"]["name"] == "serve-0", "the leader first"


class _Kube:
    def __init__(self, obj: dict | None) -> None:
        self.obj = obj

    async def get(self, path: str) -> dict | None:
        return self.obj


def test_a_replica_scaled_away_reads_as_gone_and_an_lws_never_suspends() -> None:
    sources = objects.from_lws(lws(2, 3, GANG)) or []
    group = pod_group(sources[1], "w-uid").wire()
    assert asyncio.run(LEADERWORKERSETS.read(_Kube(lws(2, 3, GANG)), group)) is not None  # type: ignore[arg-type]
    assert asyncio.run(LEADERWORKERSETS.read(_Kube(lws(1, 3, GANG)), group)) is None  # type: ignore[arg-type]
    replaced = lws(2, 3, GANG)
    replaced["metadata"]["uid"] = "another"
    assert asyncio.run(LEADERWORKERSETS.read(_Kube(replaced), group)) is None  # type: ignore[arg-type]
    assert KINDS.state(lws(2, 3, GANG), None) is OwnerState.ACTIVE
    assert KINDS.min_count(lws(2, 3, GANG)) == 3


def test_pods_of_a_gang_lws_are_gated_and_others_left_alone() -> None:
    member = {"metadata": {"name": "serve-0-1"}, "spec": {"schedulingGates": [{"name": "other"}]}}
    gated = admission.mutate_pod(member, lws(2, 3, GANG)).patch
    assert gated == {"spec": {"schedulingGates": [{"name": "other"}, {"name": keys.SCHEDULING_GATE}]}}
    assert admission.mutate_pod(member, lws(2, 3)).patch == {}, "no gang asked"
    assert admission.mutate_pod(member, None).patch == {}, "the LWS is gone"
    again = {"metadata": {}, "spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}
    assert admission.mutate_pod(again, lws(2, 3, GANG)).patch == {}


def test_admission_records_the_default_mode_and_refuses_what_it_cannot_honour() -> None:
    assert (
        admission.mutate_lws(lws(2, 3, GANG), None, gang_default_mode="all").patch["metadata"]["annotations"][keys.DISRUPTION_MODE] == "all"
    )
    with pytest.raises(GangSpecError, match=r"spec\.leaderWorkerTemplate\.size"):
        admission.validate_lws(lws(2, 3, {keys.POLICY: "gang", keys.MIN_COUNT: "4"}), None)
    with pytest.raises(GangSpecError, match=r"spec\.startupPolicy"):
        admission.validate_lws(lws(2, 3, GANG, startupPolicy="LeaderReady"), None)
    with pytest.raises(GangSpecError, match="did you mean"):
        admission.validate_lws(lws(2, 3, {f"{keys.ANNOTATION_PREFIX}mincount": "3"}), None)
    labelled = lws(2, 3, GANG)
    labelled["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {"labels": {keys.POD_GROUP_LABEL: "pair"}}
    with pytest.raises(GangSpecError, match="two groups"):
        admission.validate_lws(labelled, None)
    admission.validate_lws(lws(2, 3, {keys.POLICY: "gang", keys.MIN_COUNT: "3"}), None)
