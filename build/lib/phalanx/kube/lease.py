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
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from phalanx.kube.client import UNANSWERED, ApiError, Conflict, Kube, NotFound

logger = logging.getLogger(__name__)


def path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, timing: Timing = Timing()) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing
        self._renewed = -float("inf")
        """Monotonic time of our last successful take or renewal."""
        self._observed: tuple[Any, float] | None = None
        """(the holder's record as last read, monotonic time it was first seen so): the expiry clock is ours."""
        self.terms = 0

    @property
    def leading(self) -> bool:
        return time.monotonic() - self._renewed < self.timing.renew_deadline

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Forever: wait to be elected, lead until the Lease may be lost, stand by again."""
        while True:
            await self._campaign()
            self.terms += 1
            logger.info("leader election: %s leads (%s/%s, term %d)", self.identity, self.namespace, self.name, self.terms)
            work = asyncio.create_task(lead(), name="leading")
            try:
                await self._keep(work)
            finally:
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            logger.warning("leader election: %s stopped leading", self.identity)

    async def _campaign(self) -> None:
        """Until elected: one attempt every retry period."""
        elected = await self._try()
        while not elected:
            await asyncio.sleep(self.timing.retry_period)
            elected = await self._try()

    async def _keep(self, work: asyncio.Task[None]) -> None:
        """Renew until a renewal is overdue (or the work ends); never past the deadline."""
        while not work.done():
            await asyncio.wait({work}, timeout=self.timing.retry_period)
            if work.done():
                if not work.cancelled() and work.exception() is not None:
                    logger.error("leader election: the leader's work failed", exc_info=work.exception())
                return
            remaining = self.timing.renew_deadline - (time.monotonic() - self._renewed)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._try(), timeout=max(0.0, remaining))
            if not self.leading:
                return

    async def release(self) -> None:
        """On a clean shutdown: hand the Lease over at once instead of letting the standby wait out its duration."""
        if not self.leading:
            return
        self._renewed = -float("inf")
        try:
            lease = await self.kube.get(path(self.namespace, self.name))
            if lease is None or lease["spec"].get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now()})
            await self.kube.replace(path(self.namespace, self.name), lease)
        except (ApiError, *UNANSWERED) as exc:
            logger.warning("leader election: lease not released (%s); the standby takes over when it expires", exc)

    async def _try(self) -> bool:
        """One attempt to take or renew the Lease; True when we hold it now."""
        started = time.monotonic()  # the deadline counts from before the request: never later than the server's view
        try:
            lease = await self.kube.get(path(self.namespace, self.name))
            now = time.monotonic()
            if lease is None:
                await self.kube.create(path(self.namespace), self._lease(None))
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
            await self.kube.replace(path(self.namespace, self.name), self._lease(lease))
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
        now = _now()
        taking = spec.get("holderIdentity") != self.identity
        if taking:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if current else 0)
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.timing.lease_duration)), "renewTime": now})
        metadata = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
