"""Writes no decision waits for, run beside the walk: a waiting gang's counts, its Pending condition and its claims'
delete-protection finalizers, a released gang's Scheduled condition once its quorum is bound, and the Events that
point gated members at their group.

The walk visits the groups one after another, so every write a visit awaits is a wait for every group behind it. A
burst of 1,000 gangs of 3 created at once on 5,000 nodes made about three such writes for each gang still waiting
for its members (its counts, its Pending condition, its claims' finalizers), while the same burst kept the API
server saturated (one write 1-3 s): the walk took minutes, and the gangs whose quorum had come waited for it (the
bench's operator log: "wait for the loop 119104 ms" before the second release). None of those writes decides
anything the loop plans on: so they go here, at most `limit` at once, and the walk goes on.

One task per key at a time (a group's uid): a visit of a group whose last writes are still under way writes nothing
new (it would write the same again: the watch does not show them yet), and a visit that goes on to decide something
on the group awaits them first (`after`), so a group's writes land in the order they were made. A write that fails
is logged and counted, and a visit of the group after a back-off (0.5 s doubling to 60 s, as a failed visit's)
finds its status still behind and writes it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from phalanx.kube.client import NotFound
from phalanx.scheduling import metrics

logger = logging.getLogger(__name__)

LIMIT = 16
"""Background writes at once: as many as the releases' and the watch's connections leave room for."""


class Background:
    def __init__(self, leading: Callable[[], bool], limit: int = LIMIT) -> None:
        self.leading = leading
        """Checked before each write starts: a deposed leader starts none."""
        self._limit = asyncio.Semaphore(limit)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._backoff: dict[str, tuple[float, float]] = {}
        """Key -> (not before, last delay) of writes that failed: a group whose writes keep failing cannot spin."""

    def busy(self, key: str) -> bool:
        """True while writes of `key` are under way."""
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def run(self, key: str, stage: str, writes: Callable[[], Coroutine[Any, Any, Any]]) -> bool:
        """Start `writes()` for `key` unless writes of `key` are under way, or failed and wait out their back-off
        (False: not started). `stage`: the error metric's label when they fail."""
        if self.busy(key) or self._backoff.get(key, (0.0, 0.0))[0] > time.monotonic():
            return False

        async def go() -> Any:
            async with self._limit:
                if not self.leading():
                    return None
                try:
                    done = await writes()
                except asyncio.CancelledError:
                    raise
                except NotFound:
                    logger.info("%s: went away while its background writes (%s) ran", key, stage)
                    return None
                except Exception:  # a visit after the back-off finds the status still behind and writes it again
                    metrics.ERRORS.labels(stage=stage).inc()
                    delay = min(60.0, 2 * self._backoff.get(key, (0.0, 0.25))[1])  # 0.5 s doubling, as a failed visit
                    self._backoff[key] = (time.monotonic() + delay, delay)
                    logger.exception("%s: background writes (%s) failed; written again on a visit in %.1fs", key, stage, delay)
                    return None
                self._backoff.pop(key, None)
                return done

        task = asyncio.create_task(go(), name=f"background {stage} {key}")
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._tasks.pop(key, None) if self._tasks.get(key) is done else None)
        return True

    async def after(self, key: str) -> Any:
        """Wait for the writes of `key` under way, if any; their result (None when none, or when they failed)."""
        task = self._tasks.get(key)
        if task is None:
            return None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the writes were stopped, not the caller
                return None
            raise

    def keep_only(self, live: set[str]) -> None:
        """The back-offs of groups that are gone go with them."""
        self._backoff = {key: b for key, b in self._backoff.items() if key in live}

    def cancel(self) -> None:
        """Stop every write under way (the loop is stopping, or lost its Lease)."""
        for task in list(self._tasks.values()):
            task.cancel()
        self._tasks.clear()

    async def drain(self) -> None:
        """Wait for every write under way (tests, and a clean stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)
