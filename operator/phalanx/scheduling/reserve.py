"""Where a gang is reserved and released: the only side effects of a plan (the gate lift itself is `gates`, the
undoing of a claim's allocation `deallocation`, how a release ends otherwise `outcome`).

The reservation cycle, each step idempotent:
1. record the intent in PodGroup `status.reservation` (state Reserving),
   with everything a fresh write needs (devices, node, config), so a
   restarted operator can finish or undo it;
2. for every claim, concurrently: add the delete-protection finalizer
   (metadata; usually done as the member arrived, by `protect`, off the
   critical path), then write the allocation and `reservedFor` (status), both
   conditional on the claim's resourceVersion (from the watch's copy; a
   stale copy is read afresh and tried once more): a write that loses on a
   fresh read is a `Conflict` and aborts the release;
3. wait until our own watch shows the writes (it then shows every claim
   write before ours) and, when some pod may be mid-allocation in
   kube-scheduler (`inflight`), wait for that write to land (on evidence
   for the pods it is binding, see `_settle`) and read every claim afresh:
   a device also held by another claim (nothing upstream coordinates two
   allocators, kubernetes#128980) aborts. Our reservation yields: nobody
   else is evicted for it;
4. release every member, concurrently (`gates.lift`): one patch per pod
   pins it to its node and lifts Phalanx's gate (state Released); a member
   refused (a policy, gone) is neither pinned nor released, which is the
   refused gate lift below;
5. wait until the watch shows the pins, so the next plan counts the members
   on their nodes.
An abort before any member is released rolls back every allocation this
reservation made (and only those), so no device is leaked and no pod of an
incomplete group is released. A member refused after others were released
leaves a group that cannot reach quorum: the loop tears it down at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any, NoReturn

from phalanx.api import keys, schema, times
from phalanx.crashpoints import crash_point
from phalanx.kube.client import ApiError, Conflict, Kube, NotFound, all_answered, claim_path
from phalanx.kube.informers import ClusterView, key_of
from phalanx.planner import Fits
from phalanx.planner.model import DeviceId
from phalanx.scheduling import accessors, composites, deallocation, gates, inflight, metrics
from phalanx.scheduling.accessors import allocated_ids, claim_name, claim_names, dedicated_ids, shares, started
from phalanx.scheduling.deviceinputs import extended_resources
from phalanx.scheduling.holes import Holes
from phalanx.scheduling.outcome import GatesRefused, NotLeading, ReleaseAborted
from phalanx.scheduling.record import allocation, reservation_of, takes_whole

logger = logging.getLogger(__name__)


class Pinned(dict[str, str]):
    """Pod uid -> node of the pins this process wrote, with a `version` that moves with each one written or
    forgotten: what is built from them (the snapshot, `ClusterCache.revision`) compares the version, not the pins
    (3,000 of them sorted at each snapshot lookup took 9% of the operator's samples in a 5,000-node burst)."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def __setitem__(self, uid: str, node: str) -> None:
        super().__setitem__(uid, node)
        self.version += 1

    def __delitem__(self, uid: str) -> None:
        super().__delitem__(uid)
        self.version += 1


ANY = object()
"""`Releaser.record`'s default: written whatever the record is now (the loop's own writes, outside a release)."""


def _identity(reservation: schema.Reservation | None) -> tuple[Any, ...] | None:
    """What tells one reservation from another: its state and whom it places with which claims."""
    if reservation is None:
        return None
    return (reservation.state, tuple(p.uid for p in reservation.placements), tuple(c.uid for c in reservation.claims))


def _consuming(claim: dict[str, Any]) -> tuple[DeviceId, ...]:
    return accessors.consuming_ids(claim) or ()


class Steps:
    """How long each step of a release took, for the log: where the time between quorum and bound goes."""

    def __init__(self, start: float | None = None) -> None:
        self.last = time.monotonic() if start is None else start
        self.spent: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.spent.append((step, now - self.last))
        self.last = now

    def __str__(self) -> str:
        return ", ".join(f"{step} {seconds * 1000:.0f} ms" for step, seconds in self.spent)


class Releaser:
    def __init__(
        self,
        kube: Kube,
        view: ClusterView,
        holes: Holes,
        *,
        settle: float = 0.2,
        observe_timeout: float = 10.0,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.kube = kube
        self.leading = leading
        """Checked before each step that writes: a deposed leader's next write could land after the new leader's."""
        self.view = view
        self.holes = holes
        self.settle = settle
        self.observe_timeout = observe_timeout
        self.pinned = Pinned()
        """Pod uid -> node of the pins this process wrote: trusted before the watch shows them in a recorded reservation."""

    async def release(self, pod_group: Mapping[str, Any], fits: Fits, steps: Steps | None = None) -> schema.Reservation:
        """Record, reserve, verify, pin, lift. Raises ReleaseAborted (after a rollback) or GatesRefused."""
        steps = steps or Steps()
        reservation = reservation_of(fits)
        self._still_leading()
        recorded = await self.record(pod_group, reservation, expected=None)
        steps.done("record")
        crash_point("reserve.after-record")
        return await self.complete(recorded, reservation, steps=steps)

    async def release_member(self, pod_group: Mapping[str, Any], fits: Fits) -> schema.Reservation:
        """A late member of a group already released: the same steps, without touching the group's record."""
        return await self.complete(pod_group, reservation_of(fits), record=False)

    async def complete(
        self,
        pod_group: Mapping[str, Any],
        reservation: schema.Reservation,
        *,
        record: bool = True,
        resumed: bool = False,
        steps: Steps | None = None,
    ) -> schema.Reservation:
        namespace = pod_group["metadata"]["namespace"]
        steps = steps or Steps()
        try:
            pods = [self._pod(namespace, p) for p in reservation.placements]
            if resumed:
                await self._revalidate(namespace, reservation)
            users = self.claim_users(namespace, reservation)
            self._still_leading()
            await all_answered(self._reserve_claim(namespace, c, users.get(c.name, [])) for c in reservation.claims)
            steps.done("reserve")
            await self._await_observed(namespace, reservation)
            steps.done("observe")
            contenders = inflight.allocating(
                inflight.unplaced(self.view.pods), self.view.claims.get, extended_resources(self.view.classes.items())
            )
            if contenders and self.settle:
                await self._settle()
                self._verify(namespace, reservation, await self.kube.list_claims())
            else:
                # the watch delivers claim writes in resourceVersion order: showing ours, it shows every earlier one
                self._verify(namespace, reservation, self._holders(reservation))
            steps.done(f"settle+verify ({len(contenders)} pod(s) kube-scheduler may be allocating for)")
            crash_point("reserve.after-claims" if record else "member.after-claims")
        except ReleaseAborted as exc:
            await self.holes.cover(exc.shared, str(exc))
            await self._undo(pod_group, reservation, str(exc), record=record, resumed=resumed)
            raise
        except ApiError as exc:
            await self._undo(pod_group, reservation, f"a write was refused: {exc}", record=record, resumed=resumed)
            raise ReleaseAborted(f"a write was refused: {exc}") from exc
        self._still_leading()
        refused = await gates.lift(
            self.kube, pods, [p.node for p in reservation.placements], still_leading=self._still_leading, pinned=self.pinned
        )
        steps.done("pin+lift")
        metrics.RELEASED_PODS.inc(len(pods) - len(refused))
        self._still_leading()
        if refused and len(refused) == len(pods):
            why = "; ".join(f"{name}: {exc}" for name, exc in refused)
            await self.rollback(pod_group, reservation, f"every gate lift was refused: {why}", record=record, fence=resumed)
            raise ReleaseAborted(f"the gate lift was refused ({why})")
        crash_point("reserve.after-gates")
        released = reservation.model_copy(update={"state": "Released", "released_at": times.stamp()})
        if record:
            await self.record(pod_group, released, expected=reservation)
            steps.done("record released")
        if not await self.view.pods.wait_until(lambda: self._pinned(namespace, reservation, refused), self.observe_timeout):
            logger.warning("%s: the pins of %s did not show up in the watch in time", namespace, pod_group["metadata"]["name"])
        steps.done("observe pins")
        logger.info("%s/%s: %d members released, %s", namespace, pod_group["metadata"]["name"], len(pods), steps)
        if refused:
            raise GatesRefused("; ".join(f"gate lift of {name} refused: {exc}" for name, exc in refused), released)
        return released

    async def _undo(self, pod_group: Mapping[str, Any], reservation: schema.Reservation, why: str, *, record: bool, resumed: bool) -> None:
        """Roll back a reservation that cannot finish; but one a restart found released in part is kept as released
        (GatesRefused), so its released members meet the bind deadline and the teardown like any other's, instead
        of running below minCount with no record that they are members."""
        namespace = pod_group["metadata"]["namespace"]
        self._still_leading()
        if resumed and any(
            started(pod) and pod["metadata"]["uid"] == p.uid
            for p in reservation.placements
            if (pod := self.view.pods.get(namespace, p.name)) is not None
        ):
            await self._keep_released(pod_group, reservation, f"found released in part after a restart, and it cannot finish: {why}")
        await self.rollback(pod_group, reservation, why, record=record, fence=resumed)

    async def _keep_released(self, pod_group: Mapping[str, Any], reservation: schema.Reservation, why: str) -> NoReturn:
        released = reservation.model_copy(update={"state": "Released", "released_at": reservation.released_at or times.stamp()})
        await self.record(pod_group, released, expected=reservation)
        raise GatesRefused(why, released)

    def _still_leading(self) -> None:
        if not self.leading():
            raise NotLeading("this replica may have lost its Lease: the release stops where its record says")

    async def rollback(
        self, pod_group: Mapping[str, Any], reservation: schema.Reservation, why: str, *, record: bool = True, fence: bool = False
    ) -> None:
        """Clear every allocation this reservation made, except those of members already bound or released.

        `fence`: the reservation was begun by another process (a leader since deposed), which may still have gate
        lifts in flight. Each member still gated is written first (`gates.fence`), so such a lift, conditional on the
        pod's resourceVersion, fails; a member found released by then keeps its claim, and the reservation is kept
        as released (GatesRefused) for the teardown instead of undone."""
        namespace = pod_group["metadata"]["namespace"]
        users = self.claim_users(namespace, reservation)
        lifted = await gates.fence(self.kube, namespace, reservation, self._still_leading) if fence else set()
        if lifted:
            await self._keep_released(pod_group, reservation, f"{', '.join(sorted(lifted))} released by the leader before; {why}")
        untouchable = {
            c.name for c in reservation.claims if any(started(self.view.pods.get(namespace, u["name"])) for u in users.get(c.name, []))
        }
        await deallocation.undo(self.kube, namespace, [c for c in reservation.claims if c.name not in untouchable])
        metrics.ROLLBACKS.inc()
        logger.warning("rolled back reservation of %s/%s: %s", namespace, pod_group["metadata"]["name"], why)
        if record:
            await self.record(pod_group, None, expected=reservation)

    async def record(
        self,
        pod_group: Mapping[str, Any],
        reservation: schema.Reservation | None,
        *,
        expected: schema.Reservation | object | None = ANY,
        finished: list[str] | None = None,
    ) -> dict[str, Any]:
        """Write `status.reservation`; returns the PodGroup as written. With `expected` (the record this release
        began from), only while the record is still that one, conditional on the PodGroup's resourceVersion as
        judged: a deposed leader's write cannot land over what a new leader recorded or undid since (NotLeading:
        this release stops, writing nothing more). It is judged first on `pod_group` as the caller has it (the
        watch's copy, or the answer to this release's last record), and read afresh only when that copy has
        moved on: each read saved is a round trip of every release on a loaded API server. `finished` goes in the
        same write (`disruption.kept_finished`): a teardown ends the record and keeps what only the record told."""
        body = reservation.wire() if reservation is not None else None
        status: dict[str, Any] = {"reservation": body} | ({"finished": finished} if finished else {})
        meta = pod_group["metadata"]
        path = accessors.path(pod_group, status=True)
        if expected is ANY:
            return composites.as_written(pod_group, await self.kube.merge_patch(path, {"status": status}))
        want = _identity(expected if isinstance(expected, schema.Reservation) else None)
        current: Mapping[str, Any] | None = pod_group if meta.get("resourceVersion") else None
        for _ in range(6):
            self._still_leading()
            fresh = current is None
            if current is None:
                current = await self.kube.get(accessors.path(pod_group))
                if current is None or current["metadata"]["uid"] != meta["uid"]:
                    raise ReleaseAborted("the PodGroup is gone")
            if _identity(accessors.reservation(current)) != want:
                if fresh:
                    raise NotLeading("the recorded reservation changed under this release: another replica has taken it over")
                current = None  # the copy at hand may be behind: only a fresh read can say another replica took over
                continue
            try:
                answer = await self.kube.merge_patch(
                    path, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "status": status}
                )
                return composites.as_written(pod_group, answer)
            except Conflict:
                current = None  # the PodGroup changed (its counts, its conditions), or the copy was behind: read afresh
            except NotFound as exc:
                raise ReleaseAborted("the PodGroup is gone") from exc
        raise ReleaseAborted("the PodGroup kept changing while its reservation was being recorded")

    async def protect(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Add the delete-protection finalizer to the unallocated claims of members waiting for quorum, so the
        release writes only the allocation. Harmless on a claim never allocated: the resourceclaim controller
        drops this finalizer from a deleted claim nobody reserved. A lost race is left to the release."""

        async def add(namespace: str, obj: Mapping[str, Any]) -> None:
            with contextlib.suppress(Conflict, NotFound):
                await self.kube.merge_patch(
                    claim_path(namespace, obj["metadata"]["name"]),
                    {
                        "metadata": {
                            "resourceVersion": obj["metadata"]["resourceVersion"],
                            "finalizers": [*(obj["metadata"].get("finalizers") or []), keys.DELETE_PROTECTION],
                        }
                    },
                )

        todo: dict[tuple[str, str], Mapping[str, Any]] = {}
        for pod in pods:
            namespace = pod["metadata"]["namespace"]
            for name in claim_names(pod) or ():
                obj = self.view.claims.get(namespace, name)
                if (
                    obj is not None
                    and allocated_ids(obj) is None
                    and keys.DELETE_PROTECTION not in (obj["metadata"].get("finalizers") or [])
                ):
                    todo[(namespace, name)] = obj
        await all_answered(add(namespace, obj) for (namespace, _), obj in todo.items())

    def claim_users(self, namespace: str, reservation: schema.Reservation) -> dict[str, list[dict[str, str]]]:
        users: dict[str, list[dict[str, str]]] = {}
        claimed = {c.name for c in reservation.claims}
        for placement in reservation.placements:
            pod = self.view.pods.get(namespace, placement.name)
            if pod is None:
                continue
            for ref in pod["spec"].get("resourceClaims") or []:
                name = claim_name(pod, ref)
                if name in claimed:
                    users.setdefault(name, []).append({"resource": "pods", "name": placement.name, "uid": placement.uid})
        return users

    def _pod(self, namespace: str, placement: schema.PodPlacement) -> dict[str, Any]:
        pod = self.view.pods.get(namespace, placement.name)
        if pod is None or pod["metadata"]["uid"] != placement.uid or pod["metadata"].get("deletionTimestamp"):
            raise ReleaseAborted(f"member {placement.name} is gone")
        return pod

    async def _revalidate(self, namespace: str, reservation: schema.Reservation) -> None:
        """A recorded plan is finished only if every planned device is still free or already ours."""
        planned = {(r.driver, r.pool, r.device): c.name for c in reservation.claims for r in c.results if takes_whole(r)}
        for obj in await self.kube.list_claims():
            name = obj["metadata"]["name"]
            for device in dedicated_ids(obj):
                owner = planned.get(device)
                if owner is not None and (obj["metadata"]["namespace"], name) != (namespace, owner):
                    raise ReleaseAborted(
                        f"device {'/'.join(device)} of the recorded plan was taken by {obj['metadata']['namespace']}/{name}"
                    )

    async def _reserve_claim(self, namespace: str, claim: schema.ClaimReservation, users: list[dict[str, str]]) -> None:
        """Both writes are conditional on the resourceVersion read. The watch's copy saves a read on the critical
        path; if it was stale (a Conflict, or it looks allocated), the claim is read afresh and tried once more, and
        only a write that loses on a fresh read is a lost race."""
        cached = self.view.claims.get(namespace, claim.name)
        if cached is not None and cached["metadata"]["uid"] == claim.uid and allocated_ids(cached) is None:
            with contextlib.suppress(Conflict):
                await self._write_claim(namespace, claim, users, cached)
                return
        obj = await self.kube.get(claim_path(namespace, claim.name))
        if obj is None or obj["metadata"]["uid"] != claim.uid:
            raise ReleaseAborted(f"claim {claim.name} is gone")
        wanted = {(r.driver, r.pool, r.device) for r in claim.results}
        current = allocated_ids(obj)
        if current is not None:
            if set(current) == wanted:
                return  # written before a restart
            raise ReleaseAborted(f"claim {claim.name} was allocated elsewhere meanwhile")
        try:
            await self._write_claim(namespace, claim, users, obj)
        except Conflict:
            metrics.CONFLICTS.labels(stage="write").inc()
            raise ReleaseAborted(f"claim {claim.name} changed while reserving it (resourceVersion conflict)") from None

    async def _write_claim(
        self, namespace: str, claim: schema.ClaimReservation, users: list[dict[str, str]], obj: Mapping[str, Any]
    ) -> None:
        """The delete-protection finalizer (metadata), then the allocation (status), each conditional on `obj`'s version."""
        try:
            if keys.DELETE_PROTECTION not in (obj["metadata"].get("finalizers") or []):
                obj = await self.kube.merge_patch(
                    claim_path(namespace, claim.name),
                    {
                        "metadata": {
                            "resourceVersion": obj["metadata"]["resourceVersion"],
                            "finalizers": [*(obj["metadata"].get("finalizers") or []), keys.DELETE_PROTECTION],
                        }
                    },
                )
            await self.kube.merge_patch(
                claim_path(namespace, claim.name, status=True),
                {
                    "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    # the binding-conditions timeout of kube-scheduler counts from allocationTimestamp, which it sets
                    "status": {"allocation": {**allocation(claim), "allocationTimestamp": times.stamp()}, "reservedFor": users},
                },
            )
            crash_point("reserve.mid-claims")
        except NotFound:
            raise ReleaseAborted(f"claim {claim.name} is gone") from None

    async def _await_observed(self, namespace: str, reservation: schema.Reservation) -> None:
        def seen() -> bool:
            return all(allocated_ids(self.view.claims.get(namespace, c.name) or {}) for c in reservation.claims)

        if not await self.view.claims.wait_until(seen, self.observe_timeout):
            raise ReleaseAborted("our claim allocations did not show up in the watch in time")

    async def _settle(self) -> None:
        """Until kube-scheduler's in-flight allocations are in the API: `settle` for a scheduling cycle under way (it
        shows nothing until its binding cycle starts), then, on evidence, for every pod it is binding (nominated, its
        claims not yet written), however long its PreBind takes, up to `observe_timeout`. Still binding then, the
        release yields: its devices may be the ones that pod is about to be written."""
        await asyncio.sleep(self.settle)
        extended = extended_resources(self.view.classes.items())

        def binding() -> list[str]:
            return inflight.binding(inflight.unplaced(self.view.pods), self.view.claims.get, extended)

        if not await self.view.pods.wait_until(lambda: not binding(), self.observe_timeout):
            raise ReleaseAborted(
                f"kube-scheduler was still binding {', '.join(binding())} {self.observe_timeout:.0f}s later, its devices not "
                "yet written: ours yields and is planned again once they are"
            )

    def _pinned(self, namespace: str, reservation: schema.Reservation, refused: list[tuple[str, ApiError]]) -> bool:
        """The watch shows every member released as pinned: the next plan counts them on their nodes."""
        skip = {name for name, _ in refused}
        pods = [self.view.pods.get(namespace, p.name) for p in reservation.placements if p.name not in skip]
        return all(p is None or (p["metadata"].get("annotations") or {}).get(keys.PINNED_NODE) for p in pods)

    def _verify(self, namespace: str, reservation: schema.Reservation, claims: Iterable[Mapping[str, Any]]) -> None:
        """No device of ours may be held by any other of `claims` (every claim, as of after our writes)."""
        ours = {(namespace, c.name) for c in reservation.claims}
        whole: set[DeviceId] = {(r.driver, r.pool, r.device) for c in reservation.claims for r in c.results if takes_whole(r)}
        mine: set[DeviceId] = {(r.driver, r.pool, r.device) for c in reservation.claims for r in c.results if not r.admin_access}
        intruders, shared = [], set()
        for obj in claims:
            # a share beside a share is no conflict (the repair judges capacity); anything beside a whole device is
            both = (set(dedicated_ids(obj)) & mine) | ({d for d, _ in shares(obj)} & whole)
            if both and (obj["metadata"]["namespace"], obj["metadata"]["name"]) not in ours:
                intruders.append(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
                shared |= both
        if intruders:
            metrics.CONFLICTS.labels(stage="verify").inc(len(intruders))
            raise ReleaseAborted(
                f"devices of this reservation were also allocated to {', '.join(intruders)}; ours yields", frozenset(shared)
            )

    def _holders(self, reservation: schema.Reservation) -> list[dict[str, Any]]:
        """The claims the watch shows taking a device this reservation holds: the only ones `_verify` can find in the way.
        Looked up in the claims informer's index by each device they take (whole or a share), not by parsing every
        claim (3,000 of them for each gang of a burst of 1,000)."""
        holding = self.view.claims.index("consuming", _consuming)
        devices = {(r.driver, r.pool, r.device) for c in reservation.claims for r in c.results if not r.admin_access}
        found = {key_of(obj): obj for device in devices for obj in holding.get(device)}
        return list(found.values())

    def forget(self, live: Container[str]) -> None:
        """Pins of pods that are gone go with them."""
        for uid in [u for u in self.pinned if u not in live]:
            del self.pinned[uid]
