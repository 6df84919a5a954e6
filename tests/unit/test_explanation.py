"""`phalanx explain`'s analysis on API-shaped objects: the preemption dry run names the victims the loop would take."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

from phalanx.api import keys
from phalanx.jobs.owner import JOBS
from phalanx.scheduling import explain_lookup, explain_text, explain_view, explanation

NOW = datetime.datetime(2026, 8, 26, 12, 0, tzinfo=datetime.UTC)
DRIVER = "gpu.example.com"


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "pods": "110"}},
    }


def _slice(node: str) -> dict[str, Any]:
    return {
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": "gpu-0"}],
        }
    }


def _claim(name: str, device: str | None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "metadata": {"namespace": "ml", "name": name, "uid": f"{name}-uid"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}},
        "status": {},
    }
    if device:
        claim["status"] = {
            "allocation": {"devices": {"results": [{"driver": DRIVER, "pool": device, "device": "gpu-0", "request": "gpu"}]}}
        }
    return claim


def _pod(name: str, *, node: str | None, job_uid: str, priority: int, gated: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": f"{name}-uid",
            "labels": {keys.JOB_UID_LABEL: job_uid},
            "ownerReferences": [{"kind": "Job", "controller": True, "uid": job_uid, "name": job_uid}],
            "creationTimestamp": "2026-08-26T11:00:00Z",
        },
        "spec": {
            "nodeName": node,
            "priority": priority,
            "schedulingGates": [{"name": keys.SCHEDULING_GATE}] if gated else [],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def _group(name: str, job_uid: str, *, priority: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{name}-pg",
            "uid": f"{name}-pg-uid",
            "labels": {keys.JOB_NAME_LABEL: name},
            "ownerReferences": [{"kind": "Job", "controller": True, "uid": job_uid, "name": name}],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": priority, "disruptionMode": {"all": {}}},
        "status": {"conditions": [{"type": keys.INITIALLY_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": "m"}]},
    }


def _objects() -> explain_view.Objects:
    return explain_view.Objects(
        nodes=(_node("n1"),),
        slices=(_slice("n1"),),
        classes=({"metadata": {"name": "gpu"}, "spec": {}},),
        claims=(_claim("low-0-gpu", "n1"), _claim("urgent-0-gpu", None)),
        pods=(
            _pod("low-0", node="n1", job_uid="low-job", priority=10),
            _pod("urgent-0", node=None, job_uid="urgent-job", priority=1000, gated=True),
        ),
        podgroups=(_group("low", "low-job", priority=10), _group("urgent", "urgent-job", priority=1000)),
    )


def test_a_pending_gang_shows_what_is_short_where_and_the_victims_preemption_would_take() -> None:
    objects = _objects()
    result = explanation.explain(objects, explain_lookup.find_pod_group(objects, "ml", "urgent", JOBS), NOW, JOBS)
    assert result.state == "Pending" and result.plan is not None and result.plan.fit == 0
    assert [(s.resource, s.needed, s.free) for s in result.plan.shortages] == [("gpu", 1, 0)]
    assert [(n.name, n.devices_free, n.devices, n.excluded_by) for n in result.plan.nodes] == [("n1", 0, 1, None)]
    assert result.preemption == explain_view.PreemptionView(False, (explain_view.VictimRow("group ml/low-pg", 10, ("low-0",)),))
    lines = explain_text.text(result).splitlines()
    assert "Preemption:  would evict 1 pod(s) in 1 unit(s) (dry run; the operator does it next cycle)" in lines
    assert "  group ml/low-pg  10        low-0" in lines


def test_a_topology_key_no_node_has_is_named_with_what_would_let_it_run() -> None:
    objects = _objects()
    urgent = explain_lookup.find_pod_group(objects, "ml", "urgent", JOBS)
    urgent = {**urgent, "spec": {**urgent["spec"], "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]}}}
    result = explanation.explain(objects, urgent, NOW, JOBS)
    assert result.plan is not None and result.plan.nowhere == "no node has label topology.kubernetes.io/zone, the group's topology key"
    assert result.summary.endswith("can never fit: no node has label topology.kubernetes.io/zone, the group's topology key")
    lines = explain_text.text(result).splitlines()
    assert any(line.startswith("Gang:") and line.endswith("; topology topology.kubernetes.io/zone") for line in lines), lines
    assert (
        "To run:      nothing while no node has label topology.kubernetes.io/zone, the group's topology key: "
        "label nodes with it, or drop the key"
    ) in lines, lines


def test_no_victims_below_the_gangs_priority_says_so() -> None:
    objects = _objects()
    urgent = explain_lookup.find_pod_group(objects, "ml", "urgent", JOBS)
    urgent = {**urgent, "spec": {**urgent["spec"], "priority": 5}}
    result = explanation.explain(objects, urgent, NOW, JOBS)
    assert result.preemption is not None and result.preemption.reason is not None
    assert result.preemption.reason.startswith("no lower-priority victims: 1 running, the lowest at priority 10"), result.preemption


def test_an_unknown_job_names_the_fix() -> None:
    try:
        explain_lookup.find_pod_group(_objects(), "ml", "nope", JOBS)
    except explain_lookup.NotFoundError as exc:
        assert "no PodGroup for Job 'nope' in namespace 'ml'" in str(exc) and "-n" in str(exc)
    else:
        raise AssertionError("an unknown Job must be an error")


def test_a_waiting_gang_says_where_it_stands_in_the_queue() -> None:
    """Two gangs wait: the one of lower priority, though older, stands behind (priority, then age)."""
    base = _objects()
    older = _group("older", "older-job", priority=100)
    older["metadata"]["creationTimestamp"] = "2026-08-26T10:00:00Z"
    objects = replace(
        base,
        pods=(*base.pods, _pod("older-0", node=None, job_uid="older-job", priority=100, gated=True)),
        claims=(*base.claims, _claim("older-0-gpu", None)),
        podgroups=(*base.podgroups, older),
    )
    behind = explanation.explain(objects, explain_lookup.find_pod_group(objects, "ml", "older", JOBS), NOW, JOBS)
    assert behind.queue == "position 2 of 2 waiting (priority, then age); next ahead: ml/urgent-pg, priority 1000"
    assert "Queue:       position 2 of 2 waiting (priority, then age); next ahead: ml/urgent-pg, priority 1000" in explain_text.text(behind)
    head = explanation.explain(objects, explain_lookup.find_pod_group(objects, "ml", "urgent", JOBS), NOW, JOBS)
    assert head.queue == "position 1 of 2 waiting (priority, then age)"
    running = explanation.explain(objects, explain_lookup.find_pod_group(objects, "ml", "low", JOBS), NOW, JOBS)
    assert running.queue is None


def test_an_owner_of_several_groups_explains_the_first_still_waiting_and_names_the_others() -> None:
    """A LeaderWorkerSet's replicas are one group each: explain by the owner's name shows the first replica still
    waiting (not the newest, which may run) and names the others; an earlier owner of that name is no other of its."""

    def replica(i: int, lws_uid: str, scheduled: bool, created: str) -> dict[str, Any]:
        group = _group("serve", lws_uid, priority=0)
        group["metadata"] |= {"name": f"serve-{i}-pg", "uid": f"serve-{i}-{lws_uid}", "creationTimestamp": created}
        group["metadata"]["ownerReferences"] = [{"kind": "Job", "controller": True, "uid": lws_uid, "name": "serve"}]
        reason = keys.SCHEDULED if scheduled else keys.UNSCHEDULABLE
        group["status"]["conditions"] = [{"type": keys.INITIALLY_SCHEDULED, "status": str(scheduled), "reason": reason, "message": "m"}]
        return group

    groups = (
        replica(0, "old", False, "2026-08-26T09:00:00Z"),
        replica(0, "now", True, "2026-08-26T10:00:00Z"),
        replica(1, "now", False, "2026-08-26T10:00:00Z"),
        replica(2, "now", True, "2026-08-26T10:00:01Z"),
    )
    objects = replace(_objects(), podgroups=groups)
    first, *rest = explain_lookup.find_pod_groups(objects, "ml", "serve", JOBS)
    assert first["metadata"]["uid"] == "serve-1-now", "the replica still waiting, not the newest"
    assert explain_lookup.others(rest) == ("serve-0-pg (Scheduled)", "serve-2-pg (Scheduled)")
    result = replace(explanation.explain(objects, first, NOW, JOBS), others=explain_lookup.others(rest))
    assert "Also:        Job serve's other groups: serve-0-pg (Scheduled), serve-2-pg (Scheduled)" in explain_text.text(result)
    running = tuple(g for g in groups if g["metadata"]["uid"] != "serve-1-now")
    first, *_ = explain_lookup.find_pod_groups(replace(objects, podgroups=running), "ml", "serve", JOBS)
    assert first["metadata"]["uid"] == "serve-2-now", "none waits: the newest"
