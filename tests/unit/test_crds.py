"""crds/ is generated from the models and must never drift from them."""

from __future__ import annotations

from pathlib import Path

import yaml

from phalanx.api import crdgen

CRDS = Path(__file__).parents[2] / "crds"


def test_checked_in_crds_match_the_models() -> None:
    generated = {**crdgen.all_crds(), "kustomization.yaml": crdgen.kustomization()}
    assert sorted(p.name for p in CRDS.glob("*.yaml")) == sorted(generated), "run ./task crds"
    for name, doc in generated.items():
        assert (CRDS / name).read_text() == crdgen.render(doc), f"crds/{name} is stale: run ./task crds"


def _walk(node: object) -> list[dict]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def test_schemas_are_structural() -> None:
    for doc in crdgen.all_crds().values():
        schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for node in _walk(schema):
            assert "$ref" not in node and "anyOf" not in node and "title" not in node
            if "properties" in node and isinstance(node["properties"], dict) and "type" in node:
                assert node["type"] == "object"
                assert "additionalProperties" not in node


def test_podgroup_has_status_subresource_and_the_upstream_columns() -> None:
    pg = yaml.safe_load((CRDS / "scheduling.phalanx.dev_podgroups.yaml").read_text())
    version = pg["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Policy", "Workload", "Status", "Bound", "Disruption", "Age"]
    assert pg["spec"]["names"]["shortNames"] == ["pxpg"]
