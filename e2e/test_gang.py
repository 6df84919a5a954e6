"""The article's Example 2 with Phalanx: gang.minCount 4 on 6 GPUs, no feature gate.

Slices: dra-example-driver's: its plugin on the local control plane, its DaemonSet on Kind.
"""

from __future__ import annotations

from conftest import WORKLOADS, Cluster, Operator, wait_for

from phalanx_dev.localcluster import demo

RANKS = 4
SCHEDULED = "PodGroupInitiallyScheduled"


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict | None:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"scheduling.phalanx.dev/job-name={job}")["items"]
    return items[0] if items else None


def _condition(pod_group: dict | None, type_: str = SCHEDULED) -> dict:
    for cond in ((pod_group or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return {}


def _gated(pod: dict) -> bool:
    return any(g["name"] == "scheduling.phalanx.dev/gang" for g in pod["spec"].get("schedulingGates") or [])


def _held(cluster: Cluster) -> list[tuple]:
    claims = cluster.get("resourceclaims", "-A")["items"]
    return [
        (r["driver"], r["pool"], r["device"])
        for c in claims
        if (c.get("status") or {}).get("allocation")
        for r in c["status"]["allocation"]["devices"]["results"]
    ]


def test_the_second_gang_waits_whole_and_goes_whole(cluster: Cluster, operator: Operator, namespace: str) -> None:
    try:
        _example_2(cluster, namespace)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n--- operator log (tail) ---\n{operator.logs()[-6000:]}") from None


def _example_2(cluster: Cluster, namespace: str) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml", "gang-train-a.yaml"], namespace)
    wait_for(lambda: _condition(_pod_group(cluster, namespace, "train-a")).get("reason") == "Scheduled", "train-a Scheduled")
    demo.apply(cluster.kubectl, WORKLOADS, ["gang-train-b.yaml"], namespace)
    blocked = wait_for(
        lambda: (c := _condition(_pod_group(cluster, namespace, "train-b"))).get("reason") == "Unschedulable" and c,
        "train-b Unschedulable",
    )
    assert blocked["status"] == "False"
    shortage, _, preemption = blocked["message"].partition("; preemption: ")
    assert shortage == "minCount 4: 2 of 4 members fit; short 2 x gpu.example.com (2 free of 6); 1 node(s) had untolerated taint(s)"
    assert preemption.startswith("no lower-priority victims"), "train-a has train-b's priority: nothing to preempt, and it says so"

    # bound is not yet running where containers start for real (real nodes, Kind): wait for the containers
    a = wait_for(
        lambda: (pods := _pods(cluster, namespace, "train-a")) and all(p["status"]["phase"] == "Running" for p in pods) and pods,
        "train-a's ranks running",
    )
    b = _pods(cluster, namespace, "train-b")
    assert len(a) == RANKS
    assert len(b) == RANKS and all(_gated(p) and "nodeName" not in p["spec"] for p in b)
    held = _held(cluster)
    assert len(held) == len(set(held)) == 4, "4 GPUs held, 2 free, none twice"
    table = cluster.kubectl("get", "podgroups.scheduling.phalanx.dev", "-n", namespace).stdout
    assert " Scheduled " in table and " Unschedulable " in table

    cluster.kubectl("delete", "job", "train-a", "-n", namespace, "--cascade=background")
    observations = []

    def b_running() -> bool:
        pods = _pods(cluster, namespace, "train-b")
        claims = [c for c in cluster.get("resourceclaims", "-n", namespace)["items"] if c["metadata"]["name"].startswith("train-b")]
        bound = sum(1 for p in pods if p["spec"].get("nodeName"))
        reserved = sum(1 for c in claims if (c.get("status") or {}).get("allocation"))
        pinned = sum(1 for p in pods if "scheduling.phalanx.dev/node" in (p["metadata"].get("annotations") or {}))
        observations.append((bound, reserved, pinned))
        return sum(1 for p in pods if p["status"].get("phase") == "Running") == RANKS

    wait_for(b_running, "train-b released as a unit and running")
    # Gates are lifted one write at a time, so a member may bind while another's gate is still
    # going; what must never happen is a member bound before the whole group is reserved and pinned.
    assert all(bound == 0 or (reserved, pinned) == (RANKS, RANKS) for bound, reserved, pinned in observations), observations
    assert wait_for(lambda: _condition(_pod_group(cluster, namespace, "train-b")).get("reason") == "Scheduled", "train-b Scheduled")
    gated = wait_for(
        lambda: (c := _condition(_pod_group(cluster, namespace, "train-b"), "PodsGated")).get("status") == "False" and c,
        "train-b PodsGated=False once released",
    )
    assert gated["reason"] == "GatesLifted", gated
    for claim in cluster.get("resourceclaims", "-n", namespace)["items"]:
        if claim["metadata"]["name"].startswith("train-b"):
            assert claim["status"]["reservedFor"][0]["name"].startswith("train-b")
            assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
