"""`phalanx explain` on the local control plane: a pending, a running and a disrupted gang, read as a person reads them
(every text line checked, names and ages normalised) and as a tool does (`-o json`); then the metrics the dashboard
and the alerts use are scraped from the operator that ran them.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs, a tainted control-plane node).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import WORKLOADS, Cluster, Operator, wait_for
from prometheus_client.parser import text_string_to_metric_families

from jobs import gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import demo

ROOT = Path(__file__).parents[2]
WORKERS = ("worker-1", "worker-2", "worker-3")


def _normalised(out: str, namespace: str, pod_group: str) -> list[str]:
    """Names that differ per run (namespace, PodGroup hash, pod suffixes) and ages replaced; nothing else touched."""
    out = out.replace(pod_group, "PG").replace(namespace, "NS")
    out = re.sub(r"\b([a-z]+-\d+)-[a-z0-9]{5}\b", r"\1-xxxxx", out)
    lines = [re.sub(r"^  \d+[smhd] ", "  AGE ", line) for line in out.splitlines()]
    return [re.sub(r" {2,}", "  ", line) for line in lines]  # column widths follow the names replaced


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _condition(pg: dict, type_: str) -> dict:
    return next((c for c in (pg.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def _running(cluster: Cluster, namespace: str, job: str, count: int) -> list[dict]:
    def probe() -> list[dict] | None:
        pods = [p for p in _pods(cluster, namespace, job) if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
        return pods if len(pods) == count else None

    return wait_for(probe, f"{job}: {count} members running", timeout=300)


def _table_rows(lines: list[str], title: str) -> list[str]:
    start = lines.index(title) + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def _scrape(operator: Operator) -> str:
    assert operator.handle is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.handle.metrics_port}/metrics") as response:
        return response.read().decode()


def _listening(port: int) -> set[str]:
    """The IPv4 and IPv6 addresses a TCP socket on `port` listens on, from /proc/net (no tool needed)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                out.add(address)
    return out


def _gauge(operator: Operator) -> float:
    family = next(f for f in text_string_to_metric_families(_scrape(operator)) if f.name == "phalanx_incomplete_group_devices")
    return family.samples[0].value


@pytest.fixture
def cordoned(cluster: Cluster) -> Iterator[None]:
    """Every worker uncordoned after the test, whatever happened (the test cordons them)."""
    yield None
    for node in WORKERS:
        cluster.kubectl("uncordon", node, check=False)


def test_pending_and_running_gangs(cluster: Cluster, operator: Operator, namespace: str) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("first", 4)))
    first = _running(cluster, namespace, "first", 4)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("second", 4)))
    wait_for(
        lambda: _condition(_pod_group(cluster, namespace, "second"), keys.INITIALLY_SCHEDULED).get("reason") == "Unschedulable",
        "second: Unschedulable",
    )

    # pending: what fits, what is short and where, who is excluded, what preemption would do
    pending = _pod_group(cluster, namespace, "second")
    lines = _normalised(cluster.explain("second", namespace), namespace, pending["metadata"]["name"])
    print("\n".join(lines))
    message = _condition(pending, keys.INITIALLY_SCHEDULED)["message"]
    assert lines == [
        "Job NS/second  PodGroup PG",
        "State:  Pending: minCount 4: 2 of 4 members fit; short 2 x gpu.example.com (2 free of 6)",
        "Gang:  minCount 4, 4 members, 0 bound; priority 0; disruptionMode all",
        "Held below minCount: 0 device(s)",
        "Held by:  4 of 6 gpu.example.com held by NS/first, priority 0",
        "To run:  2 more gpu.example.com free, or a PriorityClass above 0, the holders' (preemption would then evict 4 pod(s))",
        "Queue:  position 1 of 1 waiting (priority, then age)",
        "Plan:  2 of 4 members fit (minCount 4)",
        "Short:",
        "  RESOURCE  NEEDED  FREE  TOTAL  SHORT",
        "  gpu.example.com  4  2  6  2",
        "Excluded:  1 node(s) had untolerated taint(s)",
        "Nodes:",
        "  NODE  FREE  EXCLUDED BY",
        "  control-plane  cpu=32000m  untolerated taint node-role.kubernetes.io/control-plane:NoSchedule",
        "  worker-1  devices=0/2 cpu=31900m  -",
        "  worker-2  devices=0/2 cpu=31900m  -",
        "  worker-3  devices=2/2 cpu=32000m  -",
        "Preemption:  would not help: no lower-priority victims: 1 running, the lowest at priority 0, not below the preemptor's 0",
        "Members:",
        "  NAME  STATE  NODE  DEVICES",
        "  second-0-xxxxx  Gated  -  -",
        "  second-1-xxxxx  Gated  -  -",
        "  second-2-xxxxx  Gated  -  -",
        "  second-3-xxxxx  Gated  -  -",
        "Conditions:",
        "  TYPE  STATUS  REASON  MESSAGE",
        "  PodsGated  True  Gated  pods are held by scheduling.phalanx.dev/gang until the group can be placed",
        f"  PodGroupInitiallyScheduled  False  Unschedulable  {message}",
        "Events:",
        "  AGE  TYPE  REASON  OBJECT  MESSAGE",
        f"  AGE  Warning  Unschedulable  podgroup/PG  {message}",
    ], message
    assert message == (
        "minCount 4: 2 of 4 members fit; short 2 x gpu.example.com (2 free of 6); 1 node(s) had untolerated taint(s); "
        "preemption: no lower-priority victims: 1 running, the lowest at priority 0, not below the preemptor's 0"
    )
    # a gated member points at its group, once: kubectl describe pod shows the PodGroup and the command to ask
    member = sorted(_pods(cluster, namespace, "second"), key=lambda p: p["metadata"]["name"])[0]
    selector = f"involvedObject.uid={member['metadata']['uid']},reason=WaitingForGang"
    # written beside the walk (`scheduling.background`): it may land after the verdict above
    wait_for(lambda: cluster.get("events", "-n", namespace, "--field-selector", selector)["items"], "the pointer Event on a gated member")
    described = cluster.kubectl("describe", "pod", member["metadata"]["name"], "-n", namespace).stdout
    assert f"member of PodGroup {namespace}/{pending['metadata']['name']} (gang, minCount 4)" in described, described
    assert f"why it waits: kubectl phalanx explain second -n {namespace}" in described, described
    (event,) = cluster.get("events", "-n", namespace, "--field-selector", selector)["items"]
    assert event["count"] == 1, event
    data = json.loads(cluster.explain("second", namespace, "-o", "json"))
    assert data["holders"] == [{"resource": "gpu.example.com", "holder": f"{namespace}/first", "held": "4", "total": "6", "priority": 0}]
    assert data["plan"]["fit"] == 2 and data["plan"]["shortages"] == [{"resource": "gpu.example.com", "needed": 4, "free": 2, "total": 6}]
    assert {n["name"]: n["devices_free"] for n in data["plan"]["nodes"]} == {
        "control-plane": 0,
        "worker-1": 0,
        "worker-2": 0,
        "worker-3": 2,
    }

    # running: members, nodes, devices
    running = _pod_group(cluster, namespace, "first")
    out = cluster.explain("first", namespace)
    print(out)
    lines = _normalised(out, namespace, running["metadata"]["name"])
    assert lines == [
        "Job NS/first  PodGroup PG",
        "State:  Running: 4 of 4 members bound to 2 node(s)",
        "Gang:  minCount 4, 4 members, 4 bound; priority 0; disruptionMode all",
        "Held below minCount: 0 device(s)",
        "Members:",
        "  NAME  STATE  NODE  DEVICES",
        "  first-0-xxxxx  Running  worker-1  worker-1/gpu-0",
        "  first-1-xxxxx  Running  worker-1  worker-1/gpu-1",
        "  first-2-xxxxx  Running  worker-2  worker-2/gpu-0",
        "  first-3-xxxxx  Running  worker-2  worker-2/gpu-1",
        "Conditions:",
        "  TYPE  STATUS  REASON  MESSAGE",
        "  PodsGated  False  GatesLifted  the whole group was placed and scheduling.phalanx.dev/gang lifted from its members; "
        "later members are released as they fit",
        "  PodGroupInitiallyScheduled  True  Scheduled  4 of 4 members bound to 2 node(s)",
        "Events:",
        "  AGE  TYPE  REASON  OBJECT  MESSAGE",
        "  AGE  Normal  Released  podgroup/PG  all 4 members placed on 2 node(s) (worker-1, worker-2) with 4 device(s) reserved "
        "and their gates lifted; waiting up to 60s for minCount 4 to be bound",
        "  AGE  Normal  Scheduled  podgroup/PG  4 of 4 members bound to 2 node(s)",
    ]
    data = json.loads(cluster.explain("first", namespace, "-o", "json"))
    assert data["state"] == "Running" and data["bound"] == 4, data

    # a Job that is not a gang here: a clear error naming the fix, not a traceback
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), PATH=path)
    wrong = subprocess.run(
        [cluster.kubectl_binary, "phalanx", "explain", "first", "-n", "default"], env=env, capture_output=True, text=True
    )
    assert (
        wrong.returncode == 1
        and "error: no PodGroup for Job or JobSet or LeaderWorkerSet or PodGroup 'first' in namespace 'default', nor one of that name"
        in wrong.stderr
    ), wrong.stderr
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    for pod in first:
        row = next(m for m in data["member_rows"] if m["name"] == pod["metadata"]["name"])
        claim = claims[pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]]
        held = [f"{r['pool']}/{r['device']}" for r in claim["status"]["allocation"]["devices"]["results"]]
        assert row == {"name": pod["metadata"]["name"], "state": "Running", "node": pod["spec"]["nodeName"], "devices": held}, row


def test_disrupted_gang(cluster: Cluster, operator: Operator, namespace: str, cordoned: None) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("research", 4, mode="single")))
    first = _running(cluster, namespace, "research", 4)
    for node in WORKERS:  # the Job's replacement for the lost member then stays gated: the group stays below minCount
        cluster.kubectl("cordon", node)
    lost = first[0]["metadata"]["name"]
    cluster.kubectl("annotate", "pod", lost, "-n", namespace, "localcluster.phalanx.dev/exit=1")
    wait_for(
        lambda: _condition(_pod_group(cluster, namespace, "research"), keys.DISRUPTION_TARGET).get("status") == "True",
        "research: below minCount",
    )
    wait_for(lambda: len(_pods(cluster, namespace, "research")) == 5, "research: the Job's replacement pod", timeout=60)
    pg = _pod_group(cluster, namespace, "research")
    # kubectl get says it runs below quorum, though STATUS stays Scheduled
    (row,) = cluster.kubectl("get", "podgroups.scheduling.phalanx.dev", "-n", namespace, "--no-headers").stdout.splitlines()
    assert row.split()[3:6] == ["Scheduled", "3", "BelowMinCount"], row
    out = cluster.explain("research", namespace)
    print(out)
    lines = _normalised(out, namespace, pg["metadata"]["name"])
    below = "below minCount: 3 of minCount 4 members run; lost research-0-xxxxx (failed: container rank exited 1)"
    released = (
        "all 4 members placed on 2 node(s) (worker-1, worker-2) with 4 device(s) reserved and their gates lifted; "
        "waiting up to 60s for minCount 4 to be bound"
    )
    assert lines == [
        "Job NS/research  PodGroup PG",
        f"State:  Disrupted: {below}",
        "Gang:  minCount 4, 4 members, 3 bound; priority 0; disruptionMode single",
        "Held below minCount: 3 device(s)",
        "Lost:",
        "  MEMBER  CAUSE",
        "  research-0-xxxxx  failed: container rank exited 1",
        "Members:",
        "  NAME  STATE  NODE  DEVICES",
        "  research-0-xxxxx  Failed  worker-1  -",
        "  research-0-xxxxx  Gated  -  -",
        "  research-1-xxxxx  Running  worker-1  worker-1/gpu-1",
        "  research-2-xxxxx  Running  worker-2  worker-2/gpu-0",
        "  research-3-xxxxx  Running  worker-2  worker-2/gpu-1",
        "Conditions:",
        "  TYPE  STATUS  REASON  MESSAGE",
        "  PodsGated  False  GatesLifted  the whole group was placed and scheduling.phalanx.dev/gang lifted from its members; "
        "later members are released as they fit",
        "  PodGroupInitiallyScheduled  True  Scheduled  4 of 4 members bound to 2 node(s)",
        f"  DisruptionTarget  True  BelowMinCount  {below}",
        "Events:",
        "  AGE  TYPE  REASON  OBJECT  MESSAGE",
        f"  AGE  Normal  Released  podgroup/PG  {released}",
        "  AGE  Normal  Scheduled  podgroup/PG  4 of 4 members bound to 2 node(s)",
        f"  AGE  Warning  BelowMinCount  podgroup/PG  {below}",
    ]
    data = json.loads(cluster.explain("research", namespace, "-o", "json"))
    assert data["devices_below_min_count"] == 3
    if operator.handle is not None:  # the operator's gauge counts the same 3 devices
        wait_for(lambda: _gauge(operator) == 3, "phalanx_incomplete_group_devices 3")
    assert data["losses"] == [{"member": lost, "cause": "failed: container rank exited 1"}], data["losses"]


def test_preempted_and_oversized_gangs(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A gang preempted whole says by whom and when its Job brings it back; one larger than the cluster says it never fits."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-f", str(WORKLOADS / "priorityclasses.yaml"))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("victim", 4, priority_class="research")))
    _running(cluster, namespace, "victim", 4)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("urgent", 4, priority_class="urgent")))
    _running(cluster, namespace, "urgent", 4)
    wait_for(lambda: not _pods(cluster, namespace, "victim"), "victim: its pods gone, the Job's back-off holding new ones")
    out = cluster.explain("victim", namespace)
    print(out)
    lines = _normalised(out, namespace, _pod_group(cluster, namespace, "victim")["metadata"]["name"])
    assert lines[1] == "State:  Disrupted: waiting for quorum: 0 of minCount 4 members created with their claims", lines
    (job,) = [line for line in lines if line.startswith("Job:  ")]
    assert re.fullmatch(
        r"Job:  0 of 4 pods exist \(0 active, 0 failed as the Job counts\); the Job controller's back-off holds the other 4: "
        r"about 80s after the teardown \(10s x 2\^\(n-1\), n >= 4 pods failed since its last success\), due (in about \d+s|now)",
        job,
    ), job
    lost = _table_rows(lines, "Lost:")
    assert [re.sub(r"^  victim-\d-xxxxx  ", "", row) for row in lost] == ["preempted by NS/urgent, priority 10000"] * 4, lost

    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("huge", 8)))
    wait_for(
        lambda: _condition(_pod_group(cluster, namespace, "huge"), keys.INITIALLY_SCHEDULED).get("reason") == "Unschedulable",
        "huge: Unschedulable",
    )
    lines = _normalised(cluster.explain("huge", namespace), namespace, _pod_group(cluster, namespace, "huge")["metadata"]["name"])
    assert lines[1] == "State:  Pending: minCount 8: 2 of 8 members fit; can never fit: needs 8 x gpu.example.com, the cluster has 6", lines
    assert "To run:  nothing while it needs more than the cluster has: lower minCount, or add 2 x gpu.example.com" in lines, lines
    assert not [line for line in lines if line.startswith("Held by:")], lines


def test_metrics_the_dashboard_and_alerts_use_exist(cluster: Cluster, operator: Operator) -> None:
    """Runs after the gangs above (same operator): every metric an alert or a panel queries is exposed."""
    if operator.handle is None:
        pytest.skip("no local operator process to scrape")
    exposed = {f.name for f in text_string_to_metric_families(_scrape(operator))}
    assert _listening(operator.handle.metrics_port) == {"0100007F"}, "the local operator's metrics listen on 127.0.0.1 only"
    rules = yaml.safe_load((ROOT / "manifests/monitoring/prometheusrule.yaml").read_text())
    dashboard = json.loads((ROOT / "manifests/monitoring/grafana-dashboard.json").read_text())
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|sum|count|total)$", "", n) for e in exprs for n in re.findall(r"\bphalanx_[a-z_]+", e)}
    assert used, exprs
    missing = sorted(used - exposed)
    assert not missing, f"queried but not exposed: {missing}"

    # ./task metrics: the same values, found through the port the operator recorded beside the cluster
    assert cluster.local is not None
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "phalanx"), "metrics", "--name", cluster.local.spec.name], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    printed = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines())
    assert int(printed['phalanx_podgroup_schedule_attempts_total{profile="phalanx",result="scheduled"}']) >= 2, printed  # first, research
    assert int(printed['phalanx_podgroup_schedule_attempts_total{profile="phalanx",result="unschedulable"}']) >= 1, printed
    wait_for(lambda: _gauge(operator) == 0, "no devices held by gangs below minCount once every gang is gone")
    assert int(printed["phalanx_reserved_devices_total"]) >= 8, printed
