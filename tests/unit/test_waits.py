"""phalanx_podgroups_waiting and phalanx_podgroup_oldest_wait_seconds: which gangs wait, and since when."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from apiobjects import pod, pod_group
from phalanx.scheduling import waits


def _group(uid: str, *, min_count: int = 2, priority_class: str | None = None, released: bool = False, basic: bool = False) -> Any:
    reservation = "Released" if released else None
    return pod_group(
        uid, uid=uid, min_count=min_count, basic=basic, priority_class=priority_class, scheduled=released, reservation=reservation
    )


def _pods(count: int, *, gated: bool = True) -> list[dict[str, Any]]:
    return [pod(f"p{i}", gated=gated) for i in range(count)]


def _current(groups: list[tuple[Any, list[dict[str, Any]]]], quorum_at: dict[str, float], now: float) -> dict[str, waits.Wait]:
    return waits.current([(g, waits.priority_class(g, pods)) for g, pods in groups], quorum_at, now)


def test_gangs_at_quorum_wait_by_priority_class_from_when_their_quorum_was_seen() -> None:
    groups = [(_group("a"), _pods(2)), (_group("b", priority_class="high"), _pods(3)), (_group("c"), _pods(2))]
    assert _current(groups, {"a": 100.0, "b": 900.0, "c": 400.0}, now=1000.0) == {"": (2, 900.0), "high": (1, 100.0)}


def test_released_basic_below_quorum_or_never_at_quorum_do_not_wait() -> None:
    groups = [
        (_group("released", released=True), _pods(2, gated=False)),
        (_group("basic", basic=True), _pods(2)),
        (_group("below", min_count=3), _pods(2)),  # lost members since its quorum was seen
        (_group("unseen"), _pods(2)),  # the loop has not seen its quorum (claims not ready)
    ]
    assert _current(groups, {"released": 1.0, "basic": 1.0, "below": 1.0}, now=10.0) == {}


def test_publish_keeps_a_priority_class_at_zero_once_nothing_of_it_waits() -> None:
    def sample(name: str, cls: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"priority_class": cls})

    waits.publish({"batch": (2, 30.0)})
    assert sample("phalanx_podgroups_waiting", "batch") == 2 and sample("phalanx_podgroup_oldest_wait_seconds", "batch") == 30
    assert sample("phalanx_podgroups_waiting", "") == 0, "the unlabelled series is there before anything waits"
    waits.publish({})
    assert sample("phalanx_podgroups_waiting", "batch") == 0 and sample("phalanx_podgroup_oldest_wait_seconds", "batch") == 0
