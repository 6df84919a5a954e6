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

from phalanx.localcluster import promtool
from phalanx.scheduling import metrics

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "manifests/monitoring/grafana-dashboard.json"
RULE = ROOT / "manifests/monitoring/prometheusrule.yaml"


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
    assert "SUCCESS: 2 rules found" in check.stdout, check.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum(rate(x[5m])"}]}]}))
    assert subprocess.run([str(promtool.binary()), "check", "rules", str(broken)], capture_output=True).returncode != 0


def test_every_queried_metric_is_defined() -> None:
    defined = {name for collector in list(REGISTRY._collector_to_names) for name in REGISTRY._collector_to_names[collector]}
    used = {n for e in _exprs() for n in re.findall(r"\bphalanx_[a-z_]+", e)}
    assert metrics.INCOMPLETE_GROUP_DEVICES is not None and used
    assert used <= defined, sorted(used - defined)


def test_the_article_alert_compares_unschedulable_with_scheduled() -> None:
    alert = next(
        r for g in yaml.safe_load(RULE.read_text())["spec"]["groups"] for r in g["rules"] if r["alert"] == "PhalanxGangsUnschedulable"
    )
    assert 'result="unschedulable"' in alert["expr"] and 'result="scheduled"' in alert["expr"] and "unless" in alert["expr"]
