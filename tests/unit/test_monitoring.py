"""The Grafana dashboard and the PrometheusRule: valid for their tools, and querying only metrics the operator defines."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client import REGISTRY

from phalanx import cli, memorylimit
from phalanx.kube import lease
from phalanx.scheduling import metrics
from phalanx_dev.localcluster import promtool

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "manifests/monitoring/grafana-dashboard.json"
RULE = ROOT / "manifests/monitoring/prometheusrule.yaml"
PODMONITOR = ROOT / "manifests/monitoring/podmonitor.yaml"


def _exprs() -> list[str]:
    rule = yaml.safe_load(RULE.read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    return [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]] + [
        t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])
    ]


def _within(ours: object, theirs: object, where: str = "") -> list[str]:
    """Where `ours` is not part of `theirs`: a key missing or a value changed (the model may add its defaults)."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [where]
        return [w for k, v in ours.items() for w in ([f"{where}.{k}"] if k not in theirs else _within(v, theirs[k], f"{where}.{k}"))]
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return [where]
        return [w for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for w in _within(a, b, f"{where}[{i}]")]
    return [] if ours == theirs else [where]


def test_dashboard_is_a_grafana_dashboard() -> None:
    """Grafana's dashboard model (grafana-foundation-sdk's, generated from Grafana's dashboard schema) reads every field
    back: `from_json` keeps only the fields the schema has, so a misspelt or misplaced key does not survive the round trip.
    (No JSON Schema of Grafana's dashboard is published on a package registry; this model is the nearest faithful one.)"""
    doc = json.loads(DASHBOARD.read_text())
    again = json.loads(json.dumps(Dashboard.from_json(doc), cls=JSONEncoder))
    assert _within(doc, again) == []
    broken = dict(doc, panels=[dict(doc["panels"][0], gridpos=doc["panels"][0]["gridPos"])])
    assert _within(broken, json.loads(json.dumps(Dashboard.from_json(broken), cls=JSONEncoder))) == [".panels[0].gridpos"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(set(ids)) == len(ids), "panel ids are unique"
    assert all(t["datasource"]["uid"] == "${datasource}" for p in doc["panels"] for t in p["targets"])


def test_prometheusrule_expressions_parse_with_promtool(tmp_path: Path) -> None:
    rule = yaml.safe_load(RULE.read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([str(promtool.binary()), "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    count = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert count == 6 and f"SUCCESS: {count} rules found" in check.stdout, check.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum(rate(x[5m])"}]}]}))
    assert subprocess.run([str(promtool.binary()), "check", "rules", str(broken)], capture_output=True).returncode != 0


def test_every_queried_metric_is_defined() -> None:
    defined = {name for collector in list(REGISTRY._collector_to_names) for name in REGISTRY._collector_to_names[collector]}
    used = {n for e in _exprs() for n in re.findall(r"\bphalanx_[a-z_]+", e)}
    assert metrics.INCOMPLETE_GROUP_DEVICES is not None and lease.TERMS_LOST is not None and memorylimit.USED is not None and used
    assert used <= defined, sorted(used - defined)


def _rule_test(tmp_path: Path, series: dict[str, str], minutes: int) -> list[str]:
    """The alerts promtool's rule test finds firing after `minutes` of `series` (one sample a minute), from a
    `promtool test rules` run that expects none: its failure output lists what did fire."""
    rule = yaml.safe_load(RULE.read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in series.items()],
                "alert_rule_test": [{"eval_time": f"{minutes}m", "alertname": a, "exp_alerts": []} for a in alerts],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    run = subprocess.run([str(promtool.binary()), "test", "rules", "test.yaml"], capture_output=True, text=True, cwd=tmp_path)
    if run.returncode == 0:
        return []
    fired = re.findall(r"alertname: (\w+)", run.stdout + run.stderr)
    assert fired, run.stdout + run.stderr  # failed for another reason than an alert firing
    return sorted(set(fired))


FLAT = 'phalanx_podgroup_schedule_attempts_total{result="unschedulable",profile="phalanx"}'


def test_a_gang_waiting_on_a_quiet_cluster_fires_the_article_alert(tmp_path: Path) -> None:
    """Nothing changes, so the gang is not planned again: the counter stays at 8 while the gauge keeps growing."""
    series = {FLAT: "8+0x30", 'phalanx_podgroup_oldest_wait_seconds{priority_class="batch"}': "0+60x30"}
    assert _rule_test(tmp_path, series, minutes=15) == [], "15 minutes of waiting is not yet too long"
    assert _rule_test(tmp_path, series, minutes=20) == ["PhalanxGangsUnschedulable"]


def test_nothing_waiting_fires_nothing(tmp_path: Path) -> None:
    series = {
        FLAT: "8+0x30",
        'phalanx_podgroup_oldest_wait_seconds{priority_class=""}': "0x30",
        'phalanx_podgroups_waiting{priority_class=""}': "0x30",
        "phalanx_incomplete_group_devices": "0x30",
    }
    assert _rule_test(tmp_path, series, minutes=30) == []


def test_devices_held_for_the_head_of_the_line_for_half_an_hour_fire_an_alert(tmp_path: Path) -> None:
    series = {'phalanx_held_devices{purpose="head"}': "64x60", 'phalanx_held_devices{purpose="nominated"}': "8x60"}
    assert _rule_test(tmp_path, series, minutes=25) == [], "a hold of 25 minutes is a gang waiting for its devices to free"
    assert _rule_test(tmp_path, series, minutes=40) == ["PhalanxHeadOfLineHeldTooLong"]
    assert _rule_test(tmp_path, {'phalanx_held_devices{purpose="nominated"}': "8x60"}, minutes=40) == [], "only the head's hold"


def test_ready_timeouts_in_a_row_fire_an_alert(tmp_path: Path) -> None:
    """Two timeouts in half an hour are a slow start; three are a gang that cannot get Ready."""
    assert _rule_test(tmp_path, {"phalanx_podgroup_ready_timeouts_total": "0 0 1 1 1 2 2 2 2 2"}, minutes=9) == []
    assert _rule_test(tmp_path, {"phalanx_podgroup_ready_timeouts_total": "0 0 1 1 2 2 3 3 3 3"}, minutes=9) == ["PhalanxGangsNotReady"]


def test_the_podmonitor_scrapes_the_port_the_operator_serves_metrics_on() -> None:
    deployment = yaml.safe_load((ROOT / "manifests/deployment.yaml").read_text())
    monitor = yaml.safe_load(PODMONITOR.read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    template = deployment["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert ports[endpoint["port"]] == cli.parser().parse_args(container["args"]).metrics_port != 0
    # kubectl apply -k manifests/ must work without the Prometheus Operator's CRDs
    kustomization = yaml.safe_load((ROOT / "manifests/kustomization.yaml").read_text())
    assert not any("monitoring" in r for r in kustomization["resources"])


def test_a_replica_near_its_memory_limit_fires_before_it_is_killed(tmp_path: Path) -> None:
    """At 90% of the limit for 5 minutes the alert fires; at 60% (and with no limit: NaN) it does not."""
    near = 'phalanx_memory_limit_used_ratio{namespace="phalanx-system",pod="phalanx-0"}'
    assert _rule_test(tmp_path, {near: "0.6x30"}, minutes=20) == []
    assert _rule_test(tmp_path, {near: " ".join(["NaN"] * 30)}, minutes=20) == []
    assert _rule_test(tmp_path, {near: "0.6x10 0.9x20"}, minutes=13) == [], "not yet 5 minutes above"
    assert _rule_test(tmp_path, {near: "0.6x10 0.9x20"}, minutes=20) == ["PhalanxMemoryNearLimit"]


def test_a_replica_losing_its_lease_repeatedly_fires_an_alert(tmp_path: Path) -> None:
    """Two losses in half an hour are an API server that stalled; three are a replica that cannot keep its Lease."""
    lost = 'phalanx_leader_terms_lost_total{namespace="phalanx-system",pod="phalanx-0"}'
    assert _rule_test(tmp_path, {lost: "0 0 1 1 1 2 2 2 2 2"}, minutes=9) == []
    assert _rule_test(tmp_path, {lost: "0 0 1 1 2 2 3 3 3 3"}, minutes=9) == ["PhalanxLeaderLeaseFlapping"]
