"""Host processes that belong to one local cluster, found by the kubeconfig in their environment.

No pid files: `phalanx cluster down` from any later process finds what an
earlier one started, and never touches another cluster's processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

_STARTED: dict[int, subprocess.Popen[bytes]] = {}
"""The processes this one started, kept: a Popen dropped while its process runs is reaped by the next Popen made
anywhere in this process (subprocess's own cleanup), and its exit status is lost with it."""


def start(argv: list[str], kubeconfig: Path, log: Path, env: Mapping[str, str] | None = None) -> int:
    """Start `argv` in its own process group with KUBECONFIG set (how it is found again), appending to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    environ = dict(env if env is not None else os.environ, KUBECONFIG=str(kubeconfig))
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=environ, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _STARTED[proc.pid] = proc
    return proc.pid


def free_ports(count: int) -> list[int]:
    """Distinct free ports: all sockets stay bound until every port is chosen, so the kernel cannot hand one out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find(binary: str, kubeconfig: Path) -> dict[int, dict[str, str]]:
    """Live processes of `binary` started for this kubeconfig, with their environment (a zombie has no cmdline)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            if not argv0.endswith(binary.encode()):
                continue
            env = dict(item.split("=", 1) for item in (entry / "environ").read_text().split("\0") if "=" in item)
        except OSError:
            continue
        if env.get("KUBECONFIG") == str(kubeconfig):
            found[int(entry.name)] = env
    return found


def running(binary: str, kubeconfig: Path) -> list[int]:
    return sorted(find(binary, kubeconfig))


def stop(binary: str, kubeconfig: Path, timeout: float = 10) -> None:
    """SIGTERM every such process (SIGKILL after `timeout`), and wait until none is left."""
    signalled = set(find(binary, kubeconfig))
    for pid in signalled:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while left := find(binary, kubeconfig):
        _reap(signalled)
        if time.monotonic() > deadline:
            for pid in left:
                _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.1)
    # a process drops its cmdline (so `find` no longer sees it) a moment before it can be reaped: wait for that
    deadline = time.monotonic() + timeout
    while _reap(signalled) and time.monotonic() < deadline:
        time.sleep(0.05)


def exit_status(pid: int) -> str | None:
    """How a process this one started ended ("exit code N", "killed by signal N"), None while it runs; one that is
    not a child of this process is taken as ended (another process started it, or it was reaped already)."""
    proc = _STARTED.get(pid)
    if proc is not None:
        code = proc.poll()
        if code is None:
            return None
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return "ended (not a child of this process)"
    if done == 0:
        return None
    return f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit code {os.WEXITSTATUS(status)}"


def _reap(pids: set[int]) -> set[int]:
    """Collect the exit status of processes this one started, so none lingers as a zombie; others' are not ours to
    reap. Returns (and leaves in `pids`) those of ours still running."""
    for pid in list(pids):
        if (proc := _STARTED.get(pid)) is not None:
            if proc.poll() is not None:
                pids.discard(pid)
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                pids.discard(pid)
        except ChildProcessError:
            pids.discard(pid)
    return pids


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Each process leads its own group (start_new_session), so the group id is its pid."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
