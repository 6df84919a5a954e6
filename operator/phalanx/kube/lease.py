"""Leader election on a `coordination.k8s.io` Lease: one replica acts, the others stand by.

The protocol is client-go's: a candidate reads the Lease; it may take it
when nobody holds it or when the holder's record has not changed for
`lease_duration` by the candidate's own clock (never by comparing clocks
across machines). Every take and every renewal is a PUT carrying the
resourceVersion it read, so two candidates racing for one Lease cannot
both win: the loser gets a `Conflict`. The holder renews every
`retry_period`; when it has not renewed for `renew_deadline` (shorter than
`lease_duration`), it stops acting before anyone else may take over, and
`leading` is computed from the clock, so work that checks it between steps
stops on time even when the renewing task was starved.

The Lease is renewed from a thread of its own, with its own event loop and
its own HTTP client: the operator's loop also builds each cycle's snapshot,
decodes every watch event and serves the webhooks, and at 1,000 nodes a
renewal waiting its turn there missed its deadline 48 times in 25 minutes.
The thread renews only while the operator's loop still runs its heartbeat
(`renew_deadline` at most since the last): a loop that is merely busy keeps
the Lease, a hung one loses it as it would have before, and its standby
takes over `lease_duration` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from phalanx.api import times
from phalanx.kube.client import UNANSWERED, ApiError, Conflict, Kube, NotFound

logger = logging.getLogger(__name__)

TERMS_LOST = Counter(
    "phalanx_leader_terms_lost_total",
    "Leader terms that ended because the Lease was not renewed within the renew deadline (a clean shutdown is no loss); "
    "each loss stops the scheduling loop, and the next term resumes what it left.",
)

Connect = Callable[[], Awaitable[Kube]]
"""Makes an API client in the event loop that calls it (a client is bound to the loop it was made in)."""


def path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"leader election needs 0 < --leader-retry-period ({self.retry_period}) < --leader-renew-deadline "
                f"({self.renew_deadline}) < --leader-lease-duration ({self.lease_duration}); adjust the flags to that order"
            )


class Elector:
    """Campaigns for one Lease, runs `lead()` while holding it, and cancels it the moment the Lease may be lost."""

    def __init__(self, connect: Connect, namespace: str, name: str, identity: str, timing: Timing = Timing()) -> None:
        self.connect = connect
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing
        self._renewed = -float("inf")
        """Monotonic time of our last successful take or renewal (written by the renewer's thread)."""
        self._observed: tuple[Any, float] | None = None
        """(the holder's record as last read, monotonic time it was first seen so): the expiry clock is ours."""
        self._beat = -float("inf")
        """Monotonic time the operator's event loop last ran the heartbeat: the renewer's proof that it is not hung."""
        self._halted = threading.Event()
        self._renewer: tuple[asyncio.AbstractEventLoop, asyncio.Task[None]] | None = None
        self.terms = 0
        self.lost = 0
        """Terms that ended because the Lease was not renewed in time (`phalanx_leader_terms_lost_total`)."""

    @property
    def leading(self) -> bool:
        return time.monotonic() - self._renewed < self.timing.renew_deadline

    @property
    def answering(self) -> bool:
        """The operator's event loop ran its heartbeat within the renew deadline: busy perhaps, not hung."""
        return time.monotonic() - self._beat < self.timing.renew_deadline

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Forever: wait to be elected, lead until the Lease may be lost, stand by again. Raises if the renewer's
        thread ends (it never does on its own: an API server that does not answer is a failed attempt)."""
        main = asyncio.get_running_loop()
        elected = asyncio.Event()
        self._halted.clear()
        self._renewer = None
        self._beat = time.monotonic()
        heartbeat = asyncio.create_task(self._heartbeat(), name="lease-heartbeat")
        executor = ThreadPoolExecutor(1, thread_name_prefix=f"lease-{self.name}")
        renewer = main.run_in_executor(executor, self._renew_in_thread, main, elected)
        try:
            while True:
                await self._campaign(elected, renewer)
                self.terms += 1
                logger.info("leader election: %s leads (%s/%s, term %d)", self.identity, self.namespace, self.name, self.terms)
                work = asyncio.create_task(lead(), name="leading")
                try:
                    kept = await self._keep(work, renewer)
                finally:
                    work.cancel()
                    await asyncio.gather(work, return_exceptions=True)
                if not kept:
                    self.lost += 1
                    TERMS_LOST.inc()
                logger.warning("leader election: %s stopped leading%s", self.identity, "" if kept else " (Lease not renewed in time)")
        finally:
            heartbeat.cancel()
            self._halt()
            executor.shutdown(wait=False)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(renewer), timeout=5)

    async def _heartbeat(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(self.timing.retry_period / 2)

    async def _campaign(self, elected: asyncio.Event, renewer: asyncio.Future[None]) -> None:
        """Until the renewer has taken the Lease."""
        while not self.leading:
            if renewer.done():
                renewer.result()
                raise RuntimeError("the Lease's renewer ended")
            elected.clear()
            won = asyncio.create_task(elected.wait())
            await asyncio.wait({won, renewer}, timeout=self.timing.retry_period, return_when=asyncio.FIRST_COMPLETED)
            won.cancel()

    async def _keep(self, work: asyncio.Task[None], renewer: asyncio.Future[None]) -> bool:
        """Until the work ends (True) or the renew deadline passes without a renewal (False: the term is lost)."""
        while True:
            remaining = self.timing.renew_deadline - (time.monotonic() - self._renewed)
            if remaining <= 0 or renewer.done():
                return False
            await asyncio.wait({work, renewer}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                if not work.cancelled() and work.exception() is not None:
                    logger.error("leader election: the leader's work failed", exc_info=work.exception())
                return True

    def _renew_in_thread(self, main: asyncio.AbstractEventLoop, elected: asyncio.Event) -> None:
        async def body() -> None:
            self._renewer = (asyncio.get_running_loop(), asyncio.current_task())  # type: ignore[assignment]
            if not self._halted.is_set():
                await self._renew(main, elected)

        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(body())

    def _halt(self) -> None:
        """Stop the renewer (its request in flight included); the Lease is left as it is, as after a crash."""
        self._halted.set()
        if self._renewer is not None:
            loop, task = self._renewer
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(task.cancel)

    async def _renew(self, main: asyncio.AbstractEventLoop, elected: asyncio.Event) -> None:
        """In the renewer's thread: one attempt every retry period while the operator's loop answers; a renewal
        never waits past the renew deadline."""
        kube = await self.connect()
        try:
            while not self._halted.is_set():
                if self.answering:
                    remaining = self.timing.renew_deadline - (time.monotonic() - self._renewed)
                    attempt = self._try(kube)
                    won = False
                    if remaining > 0:
                        with contextlib.suppress(TimeoutError):
                            won = await asyncio.wait_for(attempt, timeout=remaining)
                    else:
                        won = await attempt
                    if won:
                        with contextlib.suppress(RuntimeError):  # the operator's loop closed
                            main.call_soon_threadsafe(elected.set)
                else:
                    logger.warning(
                        "leader election: the event loop has not answered for %.1fs; not renewing", time.monotonic() - self._beat
                    )
                await asyncio.sleep(self.timing.retry_period)
        finally:
            await kube.api.close()

    async def release(self) -> None:
        """On a clean shutdown, after `run` ended: hand the Lease over at once instead of letting the standby wait out
        its duration."""
        if not self.leading:
            return
        self._renewed = -float("inf")
        kube = await self.connect()
        try:
            lease = await kube.get(path(self.namespace, self.name))
            if lease is None or lease["spec"].get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": times.micro_stamp()})
            await kube.replace(path(self.namespace, self.name), lease)
        except (ApiError, *UNANSWERED) as exc:
            logger.warning("leader election: lease not released (%s); the standby takes over when it expires", exc)
        finally:
            await kube.api.close()

    async def _try(self, kube: Kube) -> bool:
        """One attempt to take or renew the Lease; True when we hold it now."""
        started = time.monotonic()  # the deadline counts from before the request: never later than the server's view
        try:
            lease = await kube.get(path(self.namespace, self.name))
            now = time.monotonic()
            if lease is None:
                await kube.create(path(self.namespace), self._lease(None))
                self._renewed = started
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
            if self._observed is None or self._observed[0] != record:
                self._observed = (record, now)
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
            if holder and holder != self.identity and now - self._observed[1] < duration:
                return False
            await kube.replace(path(self.namespace, self.name), self._lease(lease))
            self._renewed = started
            return True
        except (Conflict, NotFound):
            return False  # another candidate wrote first: read again next time
        except ApiError as exc:
            logger.warning("leader election: %s", exc)
            return False
        except UNANSWERED as exc:  # the API server down or restarting: a failed attempt, never the end of the election
            logger.warning("leader election: no answer from the API server (%s: %s)", type(exc).__name__, exc)
            return False

    def _lease(self, current: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict((current or {}).get("spec") or {})
        now = times.micro_stamp()
        taking = spec.get("holderIdentity") != self.identity
        if taking:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if current else 0)
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.timing.lease_duration)), "renewTime": now})
        metadata = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
