"""Command line: the operator, its CRDs, explain and metrics; one module per command.

The development package (`dev/`, `phalanx-dev`) adds `cluster` and `demo` through the `phalanx.commands` entry
points, so the operator image, which does not carry it, has no command that needs the local control plane."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from phalanx.cli import crds, explain, metrics, run
from phalanx.cli.common import NotUp, default_cluster


def main(argv: list[str] | None = None, prog: str = "phalanx") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser(prog).parse_args(kubectl_passthrough(argv))
    try:
        return args.func(args)
    except NotUp as exc:
        print(f"phalanx: {exc}", file=sys.stderr)
        return 1


def kubectl_plugin() -> int:
    """`kubectl phalanx ...`: kubectl runs the executable `kubectl-phalanx` on PATH with the words after `phalanx`."""
    return main(sys.argv[1:], prog="kubectl phalanx")


def kubectl_passthrough(argv: list[str]) -> list[str]:
    """`phalanx cluster kubectl -n ml-team get pods` works without `--`: all after `kubectl` (and its own
    `--name X`) is kubectl's, so argparse must not read kubectl's flags as ours."""
    if argv[:2] != ["cluster", "kubectl"]:
        return argv
    rest, ours = argv[2:], []
    if rest[:1] == ["--name"] and len(rest) > 1:
        ours, rest = rest[:2], rest[2:]
    elif rest[:1] and rest[0].startswith("--name="):
        ours, rest = rest[:1], rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return ["cluster", "kubectl", *ours, "--", *rest]


def parser(prog: str = "phalanx") -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=prog, description=(__doc__ or "").split("\n\n")[0])
    commands = out.add_subparsers(required=True, metavar="COMMAND")
    run.add_parser(commands)
    crds.add_parser(commands)
    explain.add_parser(commands)
    metrics.add_parser(commands, default_cluster())
    for command in sorted(entry_points(group=COMMANDS), key=lambda e: e.name):
        command.load()(commands)
    return out


COMMANDS = "phalanx.commands"
"""The entry-point group of commands another installed package adds (each `add_parser(subparsers)`)."""
