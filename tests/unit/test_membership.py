"""Each group's members from the pods informer's index, and what the loop derives from them, kept by version.

The oracle is `accessors.pods_by_group`, the walk over every pod the cycle made before; the informer is driven by the
watch events it applies (`Informer.apply`), as the watch does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import apiobjects as api
from phalanx.api import keys
from phalanx.kinds import KINDS
from phalanx.kube.client import ApiError
from phalanx.kube.informers import Index, Informer
from phalanx.scheduling import accessors, conditions, pointers, quorum, waits
from phalanx.scheduling.membership import Membership

JSON = dict[str, Any]


def _versioned(obj: JSON, version: int) -> JSON:
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def _job_pod(name: str, job: str, version: int = 1) -> JSON:
    return _versioned(api.pod(name, gated=True, owner=api.owned_by(name=job, uid=f"{job}-uid")), version)


def _group(job: str, version: int = 1) -> JSON:
    return _versioned(api.pod_group(job, owner=api.owned_by(name=job, uid=f"{job}-uid")), version)


def _pods(*pods: JSON) -> Informer:
    informer = Informer("pods", None, "/api/v1/pods", None, lambda: None, keep=lambda obj: obj)  # type: ignore[arg-type]
    for pod in pods:
        informer.apply("ADDED", pod)
    return informer


def test_an_index_keeps_each_key_s_objects_and_moves_only_the_versions_of_keys_written() -> None:
    index = Index(lambda obj: [team] if (team := obj["metadata"]["labels"].get("team")) else [])
    a1 = {"metadata": {"namespace": "ml", "name": "a1", "labels": {"team": "a"}}}
    b1 = {"metadata": {"namespace": "ml", "name": "b1", "labels": {"team": "b"}}}
    index.put(None, a1)
    index.put(None, b1)
    a_at, b_at = index.version("a"), index.version("b")
    assert index.get("a") == [a1] and index.get("b") == [b1] and a_at != b_at

    moved = {"metadata": {"namespace": "ml", "name": "a1", "labels": {"team": "b"}}}
    index.put(a1, moved)
    assert index.get("a") == [] and "a" not in index and index.version("a") == 0, "an emptied key is one never filled"
    assert index.get("b") == [b1, moved] and index.version("b") > b_at

    b_at = index.version("b")
    index.put(None, {"metadata": {"namespace": "ml", "name": "c1", "labels": {"team": "c"}}})
    assert index.version("b") == b_at, "a write under another key leaves this one's version"

    index.put(b1, None)
    assert index.get("b") == [moved] and index.version("b") > b_at

    writes = index.writes
    index.put(None, {"metadata": {"namespace": "ml", "name": "loner", "labels": {}}})
    assert index.writes == writes, "an object under no key moves no version"

    index.rebuild({("ml", "a1"): a1})
    assert index.get("a") == [a1] and index.get("b") == [] and index.get("c") == []


def test_a_rebuild_that_leaves_no_object_under_any_key_still_moves_the_writes_and_empties_every_key() -> None:
    """A relist after 410 Gone replaces the store: when every object under a key went in the watch gap (and what is
    left is under none), a reader comparing `writes` must still see the keys emptied."""
    index = Index(lambda obj: [team] if (team := obj["metadata"]["labels"].get("team")) else [])
    a1 = {"metadata": {"namespace": "ml", "name": "a1", "labels": {"team": "a"}}}
    b1 = {"metadata": {"namespace": "ml", "name": "b1", "labels": {"team": "b"}}}
    index.put(None, a1)
    index.put(None, b1)
    writes, a_at = index.writes, index.version("a")

    index.rebuild({("ml", "loner"): {"metadata": {"namespace": "ml", "name": "loner", "labels": {}}}})
    assert index.get("a") == [] == index.get("b") and index.version("a") == 0 == index.version("b")
    assert index.writes != writes, "every key emptied: the writes moved"

    writes = index.writes
    index.rebuild({})
    index.rebuild({("ml", "a1"): a1})
    assert index.writes != writes and index.version("a") not in (0, a_at), "a key filled again has a version it never had"


async def test_a_relist_that_empties_every_group_s_members_moves_the_members_writes() -> None:
    """Every member deleted while no watch was open: the relist finds only a pod of no group, and the loop, which reads
    the memberships again only when `Membership.writes` moved, must see each group without members."""
    other = api.pod("loner", owner=[])

    class Lists:
        async def pages(self, path: str) -> AsyncIterator[JSON]:
            yield {"items": [other], "metadata": {"resourceVersion": "9"}}

    pods = Informer("pods", Lists(), "/api/v1/pods", None, lambda: None, keep=lambda obj: obj)  # type: ignore[arg-type]
    for pod in (_job_pod("a-0", "a"), _job_pod("a-1", "a"), _job_pod("b-0", "b")):
        pods.apply("ADDED", pod)
    members = Membership(pods, KINDS)
    groups = [_group("a"), _group("b")]
    members.refresh(groups)
    writes, a_at = members.writes, members.version("a-uid")
    assert [p["metadata"]["name"] for p in members["a-uid"]] == ["a-0", "a-1"]

    await pods._relist()
    assert members.writes != writes, "the memberships changed: a loop comparing the writes reads them again"
    members.refresh(groups)
    assert members["a-uid"] == [] == members["b-uid"] and members.version("a-uid") != a_at


def test_members_are_those_the_walk_over_every_pod_finds_as_the_watch_writes_them() -> None:
    pods = _pods(_job_pod("a-0", "a"), _job_pod("a-1", "a"), _job_pod("b-0", "b"), api.pod("loner", owner=[]))
    members = Membership(pods, KINDS)
    groups = [_group("a"), _group("b"), _group("c")]
    members.refresh(groups)

    def walked() -> dict[str, list[str]]:
        return {
            uid: sorted(p["metadata"]["name"] for p in found) for uid, found in accessors.pods_by_group(groups, pods.items(), KINDS).items()
        }

    def indexed() -> dict[str, list[str]]:
        return {uid: sorted(p["metadata"]["name"] for p in members[uid]) for uid in members}

    assert indexed() == walked() == {"a-uid": ["a-0", "a-1"], "b-uid": ["b-0"], "c-uid": []}
    pods.apply("ADDED", _job_pod("c-0", "c"))
    pods.apply("DELETED", _job_pod("a-1", "a"))
    pods.apply("MODIFIED", _job_pod("b-0", "b", version=2))
    assert indexed() == walked() == {"a-uid": ["a-0"], "b-uid": ["b-0"], "c-uid": ["c-0"]}
    assert members["b-uid"][0]["metadata"]["resourceVersion"] == "2", "the object as last written"

    members.refresh(groups[:1])
    assert list(members) == ["a-uid"] and members.get("b-uid") is None, "a group not refreshed has no members here"


def test_a_derived_value_is_derived_again_only_once_its_group_or_one_of_its_pods_is_written() -> None:
    """Written as of the last `refresh`: a cycle derives from the versions it began with."""
    pods = _pods(_job_pod("a-0", "a"), _job_pod("b-0", "b"))
    members = Membership(pods, KINDS)
    derived: list[str] = []

    def names(pod_group: JSON, found: list[JSON]) -> list[str]:
        derived.append(pod_group["metadata"]["name"])
        return [p["metadata"]["name"] for p in found]

    a, b = _group("a"), _group("b")
    members.refresh([a, b])
    assert members.derived(a, "names", names) == ["a-0"] and members.derived(b, "names", names) == ["b-0"]
    assert members.derived(a, "names", names) == ["a-0"] and members.derived(b, "names", names) == ["b-0"]
    assert derived == ["a", "b"], "nothing written: both served"

    pods.apply("MODIFIED", _job_pod("b-0", "b", version=2))
    assert members.derived(b, "names", names) == ["b-0"] and derived == ["a", "b"], "kept as of the cycle's refresh"
    members.refresh([a, b])
    assert members.derived(a, "names", names) == ["a-0"] and members.derived(b, "names", names) == ["b-0"]
    assert derived == ["a", "b", "b"], "b's pod written: b alone derived again"

    a = _group("a", version=2)
    pods.apply("ADDED", _job_pod("a-1", "a"))
    members.refresh([a, b])
    assert members.derived(a, "names", names) == ["a-0", "a-1"]
    assert members.derived(b, "names", names) == ["b-0"]
    assert derived == ["a", "b", "b", "a"]

    members.refresh([a])
    members.refresh([a, b])
    assert members.derived(b, "names", names) == ["b-0"] and derived[-1] == "b", "what was kept of a group gone went with it"


def test_facts_are_what_each_reader_derives_and_the_devices_held_follow_the_claims_store() -> None:
    """The facts a cycle keeps are what `pointers`, `waits` and `quorum` derive from the same objects; the devices held
    below quorum are derived again when the claims store is written, the facts are not."""
    gpu = _versioned(api.claim("a-0-gpu", "gpu-0"), 7)
    pods = _pods(_job_pod("a-0", "a"), _job_pod("a-1", "a"), _versioned(api.pod("a-2", owner=api.owned_by(name="a", uid="a-uid")), 1))
    claims = Informer("claims", None, "/claims", None, lambda: None, keep=lambda obj: obj)  # type: ignore[arg-type]
    claims.apply("ADDED", gpu)
    members = Membership(pods, KINDS)
    group = _group("a")
    group["status"] = {"conditions": [conditions.condition(keys.INITIALLY_SCHEDULED, False, keys.UNSCHEDULABLE, "short")]}
    members.refresh([group])
    every = members["a-uid"]

    facts = members.facts(group)
    assert [p["metadata"]["name"] for p in facts.live] == ["a-0", "a-1", "a-2"]
    assert facts.gated == pointers.gated_members(group, every) and [p["metadata"]["name"] for p in facts.gated] == ["a-0", "a-1"]
    assert facts.waits_in == waits.priority_class(group, every) == ""
    assert facts.claims == tuple(("ml", name) for p in every for name in accessors.claim_names(p) or ())
    assert facts.claims and facts.claims[0] == ("ml", "a-0-gpu")
    assert members.held(group, claims.get, claims.written) == quorum.held_devices(group, every, claims.get) == 1

    claims.apply("DELETED", _versioned(gpu, 8))
    assert members.facts(group) is facts, "a claim written: the facts stand"
    assert members.held(group, claims.get, claims.written) == 0


def test_the_changes_metric_counts_each_write_kept_and_not_a_write_only_its_version_moved() -> None:
    """`phalanx_watch_changes_total` says what woke the loop (the waiting bench prints it per window): it counts a
    kept write once, and a heartbeat (a new resourceVersion, nothing else) goes to the unread counter instead."""
    informer = _pods()

    def counted() -> tuple[float, float]:
        return (
            REGISTRY.get_sample_value("phalanx_watch_changes_total", {"resource": "pods"}) or 0.0,
            REGISTRY.get_sample_value("phalanx_watch_unread_changes_total", {"resource": "pods"}) or 0.0,
        )

    before = counted()
    informer.apply("ADDED", _job_pod("a-0", "a", version=1))
    relabelled = _job_pod("a-0", "a", version=2)
    relabelled["metadata"]["labels"] = {"moved": "yes"}
    informer.apply("MODIFIED", relabelled)
    after_kept = counted()
    assert after_kept == (before[0] + 2, before[1])

    only_version = copy.deepcopy(relabelled)
    only_version["metadata"]["resourceVersion"] = "3"
    informer.apply("MODIFIED", only_version)
    assert counted() == (after_kept[0], after_kept[1] + 1)


async def test_an_optional_resource_no_longer_served_empties_its_store_and_moves_what_it_wrote(monkeypatch) -> None:
    """DeviceTaintRules served, then not (the API disabled on an upgrade): the store empties, and `written` moves and
    the loop is woken, so nothing built from the old rules (devices kept from a group) stands unread."""
    rule = {"metadata": {"namespace": "", "name": "held", "resourceVersion": "3"}}

    class Gone:
        async def pages(self, path: str) -> AsyncIterator[JSON]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
            yield {}  # an async generator

    woken: list[int] = []
    rules = Informer("devicetaintrules", Gone(), "/apis/x", None, lambda: woken.append(1), keep=lambda obj: obj, optional=True)  # type: ignore[arg-type]
    rules.apply("ADDED", rule)
    written, woken[:] = rules.written, []

    async def stop(seconds: float) -> None:
        raise asyncio.CancelledError  # the first rest after the 404: the state is judged there

    monkeypatch.setattr(asyncio, "sleep", stop)
    with pytest.raises(asyncio.CancelledError):
        await rules.run()
    assert rules.store == {} and rules.synced.is_set()
    assert rules.written != written and woken, "the rules gone are a change the loop is woken for"
