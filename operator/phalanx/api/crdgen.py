"""Turn the pydantic models into structural CRD schemas.

pydantic emits JSON Schema with `$ref`s, `anyOf [X, null]` for optionals and
titles; the API server wants a structural OpenAPI v3 schema: everything
inlined, one type per node, no `additionalProperties: false` beside
`properties`. This module is that translation and nothing else.
"""

from __future__ import annotations

from typing import Any

import yaml

from phalanx.api import keys, schema

_DROP = {"title", "default", "additionalProperties"}

SHORT_NAMES = {"Workload": ["pxwl"], "PodGroup": ["pxpg"], "CompositePodGroup": ["pxcpg"]}

_POLICY_LABEL_PATH = ".metadata.labels." + keys.POLICY_LABEL.replace(".", "\\.")

_GROUP_STATUS: list[dict[str, Any]] = [
    {
        "name": "Status",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{keys.INITIALLY_SCHEDULED}")].reason',
    },
    # STATUS stays Scheduled once a gang ran (the condition is terminal): these say when it runs below quorum now
    {"name": "Bound", "type": "integer", "jsonPath": ".status.bound"},
    {
        "name": "Disruption",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{keys.DISRUPTION_TARGET}")].reason',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
"""The columns every group kind shows of its status (a PodGroup, a CompositePodGroup)."""

PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "Workload": [
        {"name": "Job", "type": "string", "jsonPath": ".spec.controllerRef.name"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "PodGroup": [
        {"name": "Policy", "type": "string", "jsonPath": _POLICY_LABEL_PATH},
        {"name": "Workload", "type": "string", "jsonPath": ".spec.workloadRef.workloadName"},
        *_GROUP_STATUS,
    ],
    "CompositePodGroup": [
        {"name": "Min-Groups", "type": "integer", "jsonPath": ".spec.schedulingPolicy.gang.minGroupCount"},
        *_GROUP_STATUS,
    ],
}


RULES = "x-kubernetes-validations"


def openapi_schema(model: type[schema.Model]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    out = _structural(raw, defs)
    out["properties"]["metadata"] = {"type": "object"}
    out["properties"]["apiVersion"] = {"type": "string"}
    out["properties"]["kind"] = {"type": "string"}
    return out


def _merged(schema_: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A field's own keywords over its type's, except validation rules: the field's (immutable) add to the type's
    (exactly one of), or the type's would be lost."""
    rules = [*schema_.get(RULES, []), *extra.get(RULES, [])]
    return {**schema_, **extra, **({RULES: rules} if rules else {})}


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        extra = {k: v for k, v in node.items() if k != "$ref"}
        node = _merged(defs[node["$ref"].rsplit("/", 1)[-1]], extra)
    if "anyOf" in node:
        members = [m for m in node["anyOf"] if m.get("type") != "null"]
        if len(members) != 1:
            raise ValueError(f"only Optional[X] unions map to a structural schema, got {node['anyOf']}")
        extra = {k: v for k, v in node.items() if k != "anyOf"}
        node = _merged(_structural(members[0], defs), extra)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    if out.get("type") == "integer":
        out.setdefault("format", "int64" if out.get("maximum", 0) > 2**31 - 1 else "int32")
    if "enum" in out:
        out.setdefault("type", "string")
    return out


def crd(model: type[schema.Model], *, status: bool) -> dict[str, Any]:
    kind = model.__name__
    plural = kind.lower() + "s"
    version: dict[str, Any] = {
        "name": keys.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
        "additionalPrinterColumns": PRINTER_COLUMNS[kind],
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{keys.GROUP}"},
        "spec": {
            "group": keys.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": SHORT_NAMES[kind],
                "categories": ["phalanx"],
            },
            "versions": [version],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD, as checked in under `crds/`."""
    return {
        f"{keys.GROUP}_workloads.yaml": crd(schema.Workload, status=False),
        f"{keys.GROUP}_podgroups.yaml": crd(schema.PodGroup, status=True),
        f"{keys.GROUP}_compositepodgroups.yaml": crd(schema.CompositePodGroup, status=True),
    }


def kustomization() -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(all_crds()),
    }


def render(doc: dict[str, Any]) -> str:
    header = "# Generated from operator/phalanx/api/schema.py by `./task crds`; do not edit.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)
