"""api/keys.py spells every key once: a name assigned twice silently replaces the first key (a reason named like an
annotation turned the rollback's fence annotation into an Event reason, which the API server's policy refused)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from phalanx.api import keys


def test_no_key_is_named_twice() -> None:
    tree = ast.parse(Path(keys.__file__).read_text())
    names = Counter(
        target.id
        for node in tree.body
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if isinstance(target, ast.Name)
    )
    assert not [name for name, count in names.items() if count > 1], names.most_common(3)
