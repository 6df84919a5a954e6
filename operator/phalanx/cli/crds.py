"""`phalanx crds`: the CRD YAML generated from the API models."""

from __future__ import annotations

import argparse
from pathlib import Path

from phalanx.api import crdgen


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    crds = commands.add_parser("crds", help="write the CRD YAML generated from the API models")
    crds.add_argument("--out", type=Path, default=Path("crds"), help="directory to write into (default crds)")
    crds.set_defaults(func=_crds)


def _crds(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in {**crdgen.all_crds(), "kustomization.yaml": crdgen.kustomization()}.items():
        (args.out / name).write_text(crdgen.render(doc))
        print(args.out / name)
    return 0
