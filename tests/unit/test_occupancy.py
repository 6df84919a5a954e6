"""What each node holds, kept as the watch writes it (`scheduling.occupancy`): whatever the writes, relists, pins,
releases under way and failed builds, the nodes and pods it puts together are those a snapshot built from scratch
of the same objects has; and a build after a few writes makes again only the nodes they touched. The informers are
real (`ClusterView`), fed events by hand."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from phalanx.api import keys
from phalanx.kube import trim
from phalanx.kube.informers import Informer, key_of
from phalanx.planner.model import Pod, Snapshot, frozen_map
from phalanx.scheduling import snapshots
from phalanx.scheduling.assumed import Assumption
from phalanx.scheduling.occupancy import Marks, Occupancy

JSON = dict[str, Any]
NODES = ("n1", "n2", "n3")
PODS = ("a", "b", "c", "d", "e")


def _node(name: str, version: int, cpu: int = 32, labels: str = "x") -> JSON:
    meta = {"name": name, "uid": f"{name}-uid", "resourceVersion": str(version), "labels": {"l": labels}}
    return {"metadata": meta, "status": {"allocatable": {"cpu": str(cpu), "memory": "256Gi", "pods": "110"}}}


def _pod(name: str, version: int, state: str, node: str, cpu: int = 1, terminating: bool = False) -> JSON:
    """`state`: bound (to `node`), released (past the gate, not bound), gated, or done (Succeeded, on `node`)."""
    spec: JSON = {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}]}
    if state in ("bound", "done"):
        spec["nodeName"] = node
    if state == "gated":
        spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    meta: JSON = {"name": name, "namespace": "ml", "uid": f"{name}-uid", "resourceVersion": str(version), "labels": {"app": name}}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": "Succeeded" if state == "done" else "Running"}}


class _Watched:
    """The cache's side: real informers (trimmed as the view trims), this occupancy's marks on them, a build as the
    cache makes one."""

    def __init__(self) -> None:
        self.view = SimpleNamespace(
            nodes=Informer("nodes", None, "/api/v1/nodes", None, lambda: None, trim.node),  # type: ignore[arg-type]
            pods=Informer("pods", None, "/api/v1/pods", None, lambda: None, trim.pod),  # type: ignore[arg-type]
        )
        self.occupancy = Occupancy()
        self.nodes = self.view.nodes.listen("occupancy", Marks)
        self.pods = self.view.pods.listen("occupancy", Marks)

    def build(self, pinned: dict[str, str], assumed: dict[str, str], fail: bool = False, during: JSON | None = None) -> tuple[Any, ...]:
        """`during`: a pod the watch writes while the build runs in its thread, after the writes were taken."""
        nodes, pods = self.nodes.take(), self.pods.take()
        members = [p for p in self.view.pods.items() if p["metadata"]["uid"] in assumed]
        if during is not None:
            self.view.pods.apply("MODIFIED", during)
        touched = self.occupancy.apply(nodes, pods)
        held = self.occupancy.assemble(touched, pinned, assumed, members)
        if not fail:  # a build that fails after applying the writes does not take them: the next applies them again
            self.nodes.taken(nodes)
            self.pods.taken(pods)
        return held

    def fresh(self, pinned: dict[str, str], assumed: dict[str, str]) -> Snapshot:
        return snapshots.build(
            self.view.nodes.items(),
            self.view.pods.items(),
            [],
            [],
            [],
            pinned=pinned,
            assumed=Assumption(frozen_map(assumed), frozen_map()),
        )


def _relist(informer: Informer, store: dict[Any, JSON]) -> None:
    """A list replaced the store (after a 410), as `Informer._relist` tells its listeners."""
    informer.store = store
    for listener in informer.indexes.values():
        listener.rebuild(store)


def _same(held: tuple[Any, ...], fresh: Snapshot) -> None:
    nodes, pods = held
    assert nodes == fresh.nodes, "every node, in the informer's order, with what it holds"
    assert sorted(pods, key=_by_name) == sorted(fresh.pods, key=_by_name), "every pod counted, where it is counted"


def _by_name(pod: Pod) -> tuple[str, str, str]:
    return (pod.namespace, pod.name, pod.node)


_EVENTS = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(PODS), st.sampled_from(("bound", "released", "gated", "done")), st.sampled_from(NODES)),
    st.tuples(st.just("terminating"), st.sampled_from(PODS), st.just(""), st.just("")),
    st.tuples(st.just("delete pod"), st.sampled_from(PODS), st.just(""), st.just("")),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from(("16", "32", "relabel")), st.just("")),
    st.tuples(st.just("delete node"), st.sampled_from(NODES), st.just(""), st.just("")),
    st.tuples(st.just("relist"), st.sampled_from(("pods", "nodes")), st.just(""), st.just("")),
    st.tuples(st.just("pin"), st.sampled_from(PODS), st.sampled_from((None, *NODES)), st.just("")),
    st.tuples(st.just("assume"), st.sampled_from(PODS), st.sampled_from((None, *NODES)), st.just("")),
    st.tuples(st.sampled_from(("build", "failed build")), st.just(""), st.just(""), st.just("")),
    st.tuples(
        st.just("build during"), st.sampled_from(PODS), st.sampled_from(("bound", "released", "gated", "done")), st.sampled_from(NODES)
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, max_size=40))
@example(  # a node deleted and made again between two builds goes last in the store's order (CI found it, one run)
    [("node", "n2", "16", ""), ("build", "", "", ""), ("node", "n1", "16", ""), ("delete node", "n2", "", ""), ("node", "n2", "16", "")]
)
@example(  # the same when it is made again alike: its Node is equal, its place is not
    [("node", "n1", "16", ""), ("node", "n2", "16", ""), ("build", "", "", ""), ("delete node", "n1", "", ""), ("node", "n1", "16", "")]
)
@example(  # the same while a list's order is still to be applied (found on the first run)
    [
        ("node", "n2", "16", ""),
        ("node", "n1", "16", ""),
        ("relist", "nodes", "", ""),
        ("delete node", "n1", "", ""),
        ("node", "n1", "16", ""),
    ]
)
def test_the_occupancy_always_puts_together_what_a_snapshot_from_scratch_has(events: list[tuple[Any, ...]]) -> None:
    """Any sequence of pod writes (bound, released, gated, finished, terminating, deleted), node writes (resized,
    relabelled, deleted, re-added at the end of the order), relists, pins moved and releases under way, with builds
    that fail between applying the writes and taking them, and writes the watch delivers while a build runs: each
    build equals one from scratch of the same objects (a write during a build is in the next)."""
    watched = _Watched()
    pinned: dict[str, str] = {}
    assumed: dict[str, str] = {}
    for version, (kind, name, what, where) in enumerate(events, start=2):
        if kind == "pod":
            watched.view.pods.apply("MODIFIED", _pod(name, version, what, where, cpu=version % 3 + 1))
        elif kind == "terminating" and (pod := watched.view.pods.get("ml", name)) is not None:
            written = {**pod, "metadata": {**pod["metadata"], "resourceVersion": str(version), "deletionTimestamp": "2026-12-06T00:00:00Z"}}
            watched.view.pods.apply("MODIFIED", written)
        elif kind == "delete pod" and (pod := watched.view.pods.get("ml", name)) is not None:
            watched.view.pods.apply("DELETED", pod)
        elif kind == "node":
            labels = str(version) if what == "relabel" else "x"  # resized alike twice, or made again alike: the same Node
            watched.view.nodes.apply("MODIFIED", _node(name, version, cpu=16 if what == "16" else 32, labels=labels))
        elif kind == "delete node" and (node := watched.view.nodes.get("", name)) is not None:
            watched.view.nodes.apply("DELETED", node)
        elif kind == "relist":
            informer = watched.view.pods if name == "pods" else watched.view.nodes
            _relist(informer, {key_of(o): o for o in reversed(informer.items())})  # a list may return another order
        elif kind == "pin":
            pinned.pop(f"{name}-uid", None) if what is None else pinned.__setitem__(f"{name}-uid", what)
        elif kind == "assume":
            assumed.pop(f"{name}-uid", None) if what is None else assumed.__setitem__(f"{name}-uid", what)
        elif kind in ("build", "failed build"):
            held = watched.build(pinned, assumed, fail=kind == "failed build")
            _same(held, watched.fresh(pinned, assumed))
        elif kind == "build during":  # what this build shows is as of its start; the write counts from the next
            watched.build(pinned, assumed, during=_pod(name, version, what, where))
    _same(watched.build(pinned, assumed), watched.fresh(pinned, assumed))


def test_a_build_after_a_few_writes_makes_again_only_the_nodes_they_touched() -> None:
    watched = _Watched()
    for i, name in enumerate(NODES):
        watched.view.nodes.apply("ADDED", _node(name, 1))
        watched.view.pods.apply("ADDED", _pod(f"p{i}", 1, "bound", name))
    first, _ = watched.build({}, {})
    again, _ = watched.build({}, {})
    assert again is first, "nothing written: the same nodes"

    watched.view.pods.apply("ADDED", _pod("new", 2, "bound", "n2"))
    nodes, _ = watched.build({}, {})
    assert nodes[0] is first[0] and nodes[2] is first[2], "the nodes no write touched are the same Node objects"
    assert nodes[1] is not first[1] and nodes[1].requested["pods"] == 2

    watched.view.pods.apply("ADDED", _pod("gated", 2, "gated", "n1"))
    nodes, pods = watched.build({}, {"gated-uid": "n3"})
    assert nodes[2].requested["pods"] == 2 and "gated" in {p.name for p in pods}, "a member of a release under way counts where planned"
    nodes, pods = watched.build({}, {})
    assert nodes[2] == first[2] and "gated" not in {p.name for p in pods}, "the release ended undone: taken off again"

    watched.view.pods.apply("MODIFIED", _pod("gated", 3, "released", "n1"))
    nodes, _ = watched.build({"gated-uid": "n1"}, {})
    assert nodes[0].requested["pods"] == 2, "released, not bound yet: counted on its pin"


def test_a_node_heartbeat_that_changes_nothing_kept_makes_no_node_again() -> None:
    watched = _Watched()
    watched.view.nodes.apply("ADDED", _node("n1", 1))
    first, _ = watched.build({}, {})
    watched.view.nodes.apply("MODIFIED", _node("n1", 2))  # a new version, the same Node
    again, _ = watched.build({}, {})
    assert again is first


def test_the_pins_this_process_wrote_move_their_version_with_each_pin_written_or_forgotten() -> None:
    """`reserve.Pinned`: the snapshot's revision compares this version, not the pins, so it must move on each."""
    from phalanx.scheduling.reserve import Pinned

    pinned = Pinned()
    seen = {pinned.version}
    pinned["u1"] = "n1"
    seen.add(pinned.version)
    pinned["u1"] = "n2"
    seen.add(pinned.version)
    del pinned["u1"]
    seen.add(pinned.version)
    assert len(seen) == 4 and pinned == {}
