"""The packing order kept between plans (`planner.order`): after any sequence of snapshots (nodes written, added,
gone, devices held and let go, the devices republished), the order is the one a full sort of that snapshot gives;
and it is kept, not sorted afresh, when a few nodes changed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.planner import catalog, order
from phalanx.planner.model import Device, Node, frozen_map

NAMES = tuple(f"n{i}" for i in range(12))


def _node(name: str, cpu_used: int) -> Node:
    return Node(name, allocatable=frozen_map({"cpu": 8000}), requested=frozen_map({"cpu": cpu_used}))


def _devices(per_node: int) -> tuple[Device, ...]:
    return tuple(Device("gpu.example.com", n, f"gpu-{i}", node_name=n) for n in NAMES[: len(NAMES) - 2] for i in range(per_node))


def _full_sort(nodes: tuple[Node, ...], held: frozenset, index: catalog.Catalog) -> list[Node]:
    """The order by definition: every node's key computed from scratch."""

    def key(node: Node) -> tuple[bool, int, int, str]:
        ids = index.local_ids.get(node.name, ())
        free = len(ids) - sum(1 for d in ids if d in held)
        return (bool(ids) and free == 0, free, node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0), node.name)

    return sorted(nodes, key=key)


_STEPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.integers(0, 8000)),
    st.tuples(st.just("remove"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("hold"), st.sampled_from(NAMES), st.integers(0, 3)),
    st.tuples(st.just("free"), st.sampled_from(NAMES), st.integers(0, 3)),
    st.tuples(st.just("republish"), st.just(""), st.integers(2, 4)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_STEPS, max_size=6), max_size=12))
def test_the_kept_order_is_always_the_full_sort_of_the_snapshot(snapshots: list[list[tuple[str, str, int]]]) -> None:
    order._kept = None
    nodes = {n: _node(n, 0) for n in NAMES}
    devices = _devices(4)
    held: set = set()
    for steps in snapshots:
        for kind, name, value in steps:
            if kind == "write":
                nodes[name] = _node(name, value)
            elif kind == "remove":
                nodes.pop(name, None)
            elif kind == "hold":
                held.add(("gpu.example.com", name, f"gpu-{value}"))
            elif kind == "free":
                held.discard(("gpu.example.com", name, f"gpu-{value}"))
            else:
                devices = _devices(value)
        snapshot_nodes, frozen, index = tuple(nodes.values()), frozenset(held), catalog.of(devices)
        assert order.busy_first(snapshot_nodes, frozen, index) == _full_sort(snapshot_nodes, frozen, index)


def test_a_few_nodes_changed_are_put_back_in_their_place_without_a_sort() -> None:
    order._kept = None
    index = catalog.of(_devices(2))
    nodes = tuple(_node(f"m{i}", 0) for i in range(40)) + tuple(_node(n, 0) for n in NAMES)  # 2 of 52 change: no sort
    first = order.busy_first(nodes, frozenset(), index)
    kept = order._kept
    changed = (replace(nodes[3], requested=frozen_map({"cpu": 4000})), *nodes[:3], *nodes[4:])
    held = frozenset({("gpu.example.com", "n5", "gpu-0")})
    again = order.busy_first(changed, held, index)
    assert again == _full_sort(changed, held, index) and again != first
    assert order._kept is not kept and order._kept.keys["m0"] is kept.keys["m0"], "the keys of nodes unchanged are kept"
