"""The product package is the product: what the operator image installs carries no development harness (the local
control plane, the image builder, real nodes, the demo), and nothing in it needs that harness to run."""

from __future__ import annotations

import ast
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

from phalanx import cli
from phalanx_dev.localcluster import images

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "phalanx"


def _top_level_imports(path: Path) -> set[str]:
    """The modules a file imports when it is imported (not those a function imports when it runs)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_product_module_imports_the_development_package_when_imported() -> None:
    needing = sorted(
        str(path.relative_to(ROOT))
        for path in PRODUCT.rglob("*.py")
        if any(name.split(".")[0] == "phalanx_dev" for name in _top_level_imports(path))
    )
    assert not needing, f"product modules that cannot be imported without phalanx-dev: {needing}"


def test_the_wheel_the_image_installs_carries_no_harness(tmp_path: Path) -> None:
    """Built as the image builder builds it, from what the Dockerfile copies."""
    images.product_wheels(ROOT, tmp_path, deps=False)
    (wheel,) = tmp_path.glob("phalanx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "phalanx/scheduling/loop.py" in names, "the wheel holds the operator"
    harness = [n for n in names if "localcluster" in n or n.startswith("phalanx_dev") or n.endswith((".sh", "kwokctl.yaml"))]
    assert not harness, harness


def test_the_development_commands_come_from_the_development_package() -> None:
    """`./task` installs phalanx-dev, whose entry points add `cluster` and `demo`; the product alone has run, crds,
    explain and metrics."""
    added = {e.name: e.value for e in entry_points(group=cli.COMMANDS)}
    assert set(added) == {"cluster", "demo"} and all(v.startswith("phalanx_dev.cli.") for v in added.values()), added
    assert cli.parser().parse_args(["cluster", "down"]).func.__module__ == "phalanx_dev.cli.cluster"
    product = PRODUCT / "cli"
    assert not (product / "cluster.py").exists() and not (product / "demo.py").exists()


KINDS = ("jobs", "jobsets", "podgroups")


def _kinds_imported(path: Path) -> set[str]:
    """The kinds (`phalanx.KIND...`) a file imports when it is imported."""
    return {parts[1] for parts in (n.split(".") for n in _top_level_imports(path)) if len(parts) > 1 and parts[1] in KINDS}


def test_the_kinds_framework_imports_no_kind_and_the_loop_knows_none() -> None:
    """Kueue's jobframework pattern: the kinds plug into `owners/`, never the other way round, and the loop reaches
    an owner only through the seam. A JobSet's replicated Job is a Job template, so `jobsets/admission.py` may apply
    the Job kind's template rules; no other kind imports another."""
    found = []
    for package in ("owners", "scheduling", "planner"):
        found += [f"{path.relative_to(ROOT)} imports {k}" for path in (PRODUCT / package).rglob("*.py") for k in _kinds_imported(path)]
    allowed = {PRODUCT / "jobsets" / "admission.py": {"jobs"}}
    for kind in KINDS:
        for path in (PRODUCT / kind).rglob("*.py"):
            others = _kinds_imported(path) - {kind} - allowed.get(path, set())
            found += [f"{path.relative_to(ROOT)} imports {k}" for k in sorted(others)]
    assert not found, found
