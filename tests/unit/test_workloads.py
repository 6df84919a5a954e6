"""The quick start's Jobs follow the README's advice: a gang Job ignores the members Phalanx takes down."""

from __future__ import annotations

from pathlib import Path

import yaml

from phalanx.api import keys

WORKLOADS = Path(__file__).parents[2] / "e2e" / "workloads"


def _gang_jobs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(WORKLOADS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Job":
                continue
            annotations = doc["metadata"].get("annotations") or {}
            if "scheduling" in doc["spec"] or any(k.startswith(keys.ANNOTATION_PREFIX) for k in annotations):
                out.append((path.name, doc))
    return out


def test_every_gang_job_of_the_quick_start_ignores_disruptions() -> None:
    jobs = _gang_jobs()
    assert {"gang-train-a.yaml", "gang-train-b.yaml"} <= {name for name, _ in jobs}
    for name, job in jobs:
        rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
        ignored = [r for r in rules if r["action"] == "Ignore" and {"type": keys.DISRUPTION_TARGET} in r.get("onPodConditions", [])]
        assert ignored, f"{name}: spec.podFailurePolicy lacks the rule the README recommends (Ignore on DisruptionTarget)"
