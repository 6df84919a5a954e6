"""A gang preemption always ends, and holds what its victims free until its preemptor has it: a preemption a
PodDisruptionBudget blocks gives up by its deadline and releases its holds, a crash between recording the
nomination and covering its devices is repaired by the next operator, and the deadline counts from when the
victims are gone, not from the nomination, so a victim's long grace period does not eat it.

Each test runs operators of its own (a short bind deadline, the preemption's deadline). Slices: the session
cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import datetime
import json
import signal
from pathlib import Path
from typing import Any

from conftest import WORKLOADS, Cluster, wait_for

import faultcheck
import test_fault_crash
from jobs import gpu_gang, one_gpu_pod_spec, priority_classes
from phalanx.api import keys
from phalanx.crashpoints import ENV
from phalanx.scheduling import holes
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
operators = test_fault_crash.operators
"""The crash suite's fixture: operator processes a test starts, stopped at its end."""


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _pod(name: str, labels: dict[str, str], priority_class: str | None = None) -> dict[str, Any]:
    spec = one_gpu_pod_spec()
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _running(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods = cluster.get("pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in pods if p["spec"].get("nodeName") and faultcheck.live(p) and (p.get("status") or {}).get("phase") == "Running"]


def _nominated_rules(cluster: Cluster) -> set[str]:
    """The devices Phalanx's `nominated` DeviceTaintRules hold, as driver/pool/device."""
    rules = cluster.get("devicetaintrules", "-l", f"{keys.TAINT_PURPOSE_LABEL}={holes.NOMINATED}")["items"]
    return {r["metadata"]["annotations"][keys.HELD_DEVICE_ANNOTATION] for r in rules}


def _given_up(cluster: Cluster, namespace: str) -> str:
    """The message of the Warning Event saying a preemption was given up ('' while there is none): the PodGroup's
    condition says it only until the next attempt."""
    events = cluster.get("events", "-n", namespace)["items"]
    return next((e["message"] for e in events if "preemption given up" in e.get("message", "")), "")


def _time(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_preemption_a_budget_blocks_gives_up_by_its_deadline_and_strands_nothing(
    cluster: Cluster, operators: list[operatorproc.OperatorProcess], namespace: str
) -> None:
    """Four low pods hold four GPUs under a budget allowing 2 disruptions; an urgent gang of 4 nominates two of them.
    The operator is killed right after recording the nomination (before covering the devices or evicting), and the
    budget is tightened to 1 meanwhile. The next operator covers the nominated devices, evicts one victim (the
    budget refuses the other), holds the freed device for the preemptor, and gives up at the deadline: the holds
    go, the status says why, and the freed device goes to whoever needs it."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        _apply(cluster, namespace, *(_pod(f"low-{i}", {"app": "low"}, low) for i in range(4)))
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "low"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "low"}}},
        }
        _apply(cluster, namespace, budget)
        wait_for(lambda: len(_running(cluster, namespace, "app=low")) == 4, "the low pods running")
        wait_for(lambda: cluster.get("pdb", "low", "-n", namespace)["status"].get("disruptionsAllowed") == 2, "the budget allows 2")
        armed = operatorproc.start(cluster.local, ROOT, env={ENV: "nomination.after-record"}, extra_args=("--bind-deadline", "15"))
        operators.append(armed)
        _apply(cluster, namespace, gpu_gang("urgent", 4, priority_class=urgent))
        wait_for(lambda: armed.process.poll() is not None, "the operator killed after recording the nomination", timeout=120)
        assert armed.process.returncode == -signal.SIGKILL and "crash point nomination.after-record hit" in armed.logs()
        nomination = (_pod_group(cluster, namespace, "urgent").get("status") or {}).get("nomination") or {}
        assert len(nomination.get("victims") or []) == 2 and not _nominated_rules(cluster) & set(nomination["devices"]), (
            "recorded, and nothing covered yet"
        )
        budget["spec"]["minAvailable"] = 3
        _apply(cluster, namespace, budget)
        wait_for(lambda: cluster.get("pdb", "low", "-n", namespace)["status"].get("disruptionsAllowed") == 1, "the budget allows 1")

        clean = operatorproc.start(cluster.local, ROOT, extra_args=("--bind-deadline", "15"))
        operators.append(clean)
        held = set(nomination["devices"])

        def covered() -> set[str]:
            """The devices the next operator's log says it kept for the preemptor (the rules may go again within a
            second: a restart that took longer than the deadline gives up at its first look)."""
            return {d for d in held if f"device {d} kept from kube-scheduler until free: preempted by" in clean.logs()}

        wait_for(lambda: covered() == held, "the next operator covers the nominated devices", timeout=60)
        given_up = wait_for(lambda: _given_up(cluster, namespace), "the preemption given up at its deadline", timeout=120)
        low_now = {p["metadata"]["name"]: p for p in cluster.get("pods", "-n", namespace, "-l", "app=low")["items"]}
        victims = [v["name"] for v in nomination["victims"]]
        evicted = [v for v in victims if v not in low_now or low_now[v]["metadata"].get("deletionTimestamp")]
        assert len(evicted) == 1, f"one victim evicted, the budget refused the other: {evicted}"
        assert "refused" in given_up and "disruption budget" in given_up, given_up
        assert not (_pod_group(cluster, namespace, "urgent").get("status") or {}).get("nomination"), "the nomination forgotten"
        assert not held & _nominated_rules(cluster), "its holds released"
        assert len(_running(cluster, namespace, "app=low")) == 3, "one victim went, the budget kept the other"
        _apply(cluster, namespace, *(_pod(f"taker-{i}", {"app": "taker"}) for i in range(3)))
        wait_for(lambda: len(_running(cluster, namespace, "app=taker")) == 3, "every free device, the freed one too, taken", timeout=60)
        wrong = [w for w in faultcheck.violations(faultcheck.take(cluster.kubectl, namespace)) if "wait while" not in w]
        assert not wrong, wrong


def test_the_preemption_deadline_counts_from_when_the_victims_are_gone(
    cluster: Cluster, operators: list[operatorproc.OperatorProcess], namespace: str
) -> None:
    """A low gang of 4 whose ranks take 20 s to stop (their grace period) is preempted by an urgent gang of 4, with a
    bind deadline of 8 s, while plain pods wait for any GPU. Counted from the nomination, the deadline would pass
    while the victims still stop, the held devices would go to the waiting pods as they free up, and the urgent
    gang would have to evict them in turn. Counted from when the victims are gone, the urgent gang gets them."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    operators.append(operatorproc.start(cluster.local, ROOT, extra_args=("--bind-deadline", "8")))
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        _apply(cluster, namespace, gpu_gang("low", 4, mode="all", priority_class=low, grace=20))
        wait_for(lambda: len(_running(cluster, namespace, "app=low")) == 4, "the low gang running", timeout=120)
        _apply(cluster, namespace, *(_pod(f"taker-{i}", {"app": "taker"}) for i in range(3)))
        wait_for(lambda: len(_running(cluster, namespace, "app=taker")) == 2, "two takers on the free GPUs, one waiting")
        takers = {p["metadata"]["uid"] for p in _running(cluster, namespace, "app=taker")}
        _apply(cluster, namespace, gpu_gang("urgent", 4, mode="all", priority_class=urgent))
        nomination = wait_for(
            lambda: (_pod_group(cluster, namespace, "urgent").get("status") or {}).get("nomination"), "the nomination", timeout=60
        )
        victims = wait_for(
            lambda: (
                (v := [p for p in cluster.get("pods", "-n", namespace, "-l", "app=low")["items"] if p["metadata"].get("deletionTimestamp")])
                and len(v) == 4
                and v
            ),
            "the victims stopping",
        )
        nominated = _time(nomination["nominatedAt"])
        last_stop = max(_time(p["metadata"]["deletionTimestamp"]) for p in victims)  # deletion time plus grace period
        assert (last_stop - nominated).total_seconds() > 8, "the victims still run when a deadline from the nomination would pass"
        continuous = faultcheck.Continuous()

        def urgent_runs() -> bool:
            wrong = continuous.check(faultcheck.take(cluster.kubectl, namespace))
            assert not wrong, wrong
            return len(_running(cluster, namespace, "app=urgent")) == 4

        wait_for(urgent_runs, "the urgent gang running on the devices its victims freed", timeout=120)
        after = _running(cluster, namespace, "app=taker")
        assert {p["metadata"]["uid"] for p in after} == takers, "no taker evicted, none placed on a device held for the urgent gang"
        assert not _given_up(cluster, namespace), "the preemption never gave up"
