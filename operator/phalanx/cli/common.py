"""What every command shares: the default cluster and checkout, how a task is typed, how a command says it cannot run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# operator/phalanx/cli/common.py -> the checkout, which holds crds/ and manifests/ (an editable install, as ./task makes).
DEFAULT_REPO = Path(__file__).resolve().parents[3]
DEFAULT_CLUSTER = "phalanx"
"""The tasks' default too (`CLUSTER` in Taskfile.yml): a hint for it needs no `CLUSTER=`."""


def default_cluster() -> str:
    """$PHALANX_CLUSTER, else `phalanx`: read when the parser is built, so every command agrees on it."""
    return os.environ.get("PHALANX_CLUSTER") or DEFAULT_CLUSTER


def task_hint(command: str, name: str) -> str:
    """`./task COMMAND` as it must be typed for cluster `name`: the tasks pick their cluster from CLUSTER=."""
    return f"`./task {command}`" if name == DEFAULT_CLUSTER else f"`CLUSTER={name} ./task {command}`"


class NotUp(Exception):
    """A command that needs the local cluster found none."""


def add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=default_cluster(), help=f"cluster name (default $PHALANX_CLUSTER or {DEFAULT_CLUSTER})")


def say(message: str) -> None:
    print(f"phalanx: {message}", file=sys.stderr, flush=True)
