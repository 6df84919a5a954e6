"""A gang of roles: a CompositePodGroup (upstream's KEP-6012) and its child PodGroups, seen by the loop as one group.

Upstream says "one launcher and at least three workers" with a CompositePodGroup whose gang policy says how many of
its child groups go together (`minGroupCount`), and one PodGroup per role (`parentCompositePodGroupName`, each with
its own `gang.minCount`). A count over all members cannot say it: four workers would go without their launcher.
A gang JobSet asks for the same with `scheduling.phalanx.dev/role-min-counts` (`jobsets.roles`): Phalanx makes the
composite and a child per replicated Job, and the role label names a child's role and its pods'.

The loop plans, reserves, releases, tears down and reports one group at a time, and a root gang composite is that
group here. `groups` gives the loop every PodGroup that is a group of its own and every root gang composite as a
PodGroup-shaped object: the composite's metadata and status (every write goes to the composite, `accessors.path`),
a spec that is the composite's (disruptionMode, priority, topology) with minCount the sum of its roles' minimums,
and its roles (`keys.ROLES`), which the planner places each at its own minimum (`planner.model.Role`). A member's
role is its role label, else the PodGroup its `pod-group` label names (`role_of`).

What Phalanx does not model, it says here and in the README:
- a gang composite places every child group it has, together: a minGroupCount below the number of children is met
  by all of them (stricter than upstream, never partial); with fewer children than minGroupCount it waits;
- a basic child is a role of minimum 0: its members go with the gang when they fit;
- a basic composite's children are groups of their own, placed independently, as upstream;
- a child's own disruptionMode and priority give way to its composite's (unset: `all`, Phalanx's gang default);
- nesting (a composite with a parent) is refused by the CRD.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from phalanx.api import keys

JSON = dict[str, Any]
_COPIED = ("priorityClassName", "priority", "preemptionPolicy", "schedulingConstraints")


def parent(pod_group: Mapping[str, Any]) -> str | None:
    """The CompositePodGroup the PodGroup is a child of (None: none)."""
    return (pod_group.get("spec") or {}).get("parentCompositePodGroupName")


def is_composite(group: Mapping[str, Any]) -> bool:
    return group.get("kind") == keys.COMPOSITE_KIND


def gang(composite: Mapping[str, Any]) -> bool:
    return "gang" in ((composite.get("spec") or {}).get("schedulingPolicy") or {})


def role_minimum(child: Mapping[str, Any]) -> int:
    """A child's minCount; 0 for a basic child (its members go along when they fit)."""
    gang_policy = ((child.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
    return int(gang_policy["minCount"]) if gang_policy else 0


def role_name(child: Mapping[str, Any]) -> str:
    """A child PodGroup's role: the role label Phalanx sets on the children it makes for an owner (a JobSet's
    replicated Job), else the child's own name (a user's, whose pods name it by their pod-group label)."""
    return (child["metadata"].get("labels") or {}).get(keys.ROLE_LABEL) or child["metadata"]["name"]


def role_of(pod: Mapping[str, Any]) -> str:
    """The role a member is in, by the same rule as `role_name` ("" for none)."""
    labels = pod["metadata"].get("labels") or {}
    return labels.get(keys.ROLE_LABEL) or labels.get(keys.POD_GROUP_LABEL, "")


def roles(group: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """((role name, its minimum), ...) of a composite as the loop's group; () for any other group."""
    return tuple(group.get(keys.ROLES) or ())


def describe(group: Mapping[str, Any]) -> str:
    """Its roles and their minimums, for a message ("" for a group without roles)."""
    found = roles(group)
    return ("; roles: " + ", ".join(f"{name} minCount {minimum}" for name, minimum in found)) if found else ""


def below(group: Mapping[str, Any], bound: Iterable[Mapping[str, Any]]) -> list[str]:
    """Each role with fewer members bound than its minimum, as "name n of minCount m" (none for a group without
    roles): a `single` composite runs on below it, and says so."""
    found = roles(group)
    if not found:
        return []
    counts: dict[str, int] = defaultdict(int)
    for pod in bound:
        counts[role_of(pod)] += 1
    return [f"{name} {counts[name]} of minCount {minimum}" for name, minimum in found if counts[name] < minimum]


def less(group: JSON, counted: Iterable[Mapping[str, Any]]) -> JSON:
    """The group with each role's minimum less its members in `counted`, as a count over all members is judged less
    the members done: a role's members that finished their work (a launcher that exited 0 is not run again, and a
    gang made again without it would wait for it for ever), and, as late members are planned, those already past
    the gate (a late worker of a role at its minimum goes alone; a role below it needs the rest together)."""
    found = roles(group)
    if not found:
        return group
    counts: dict[str, int] = defaultdict(int)
    for pod in counted:
        counts[role_of(pod)] += 1
    if not any(counts[name] for name, _ in found):
        return group
    return {**group, keys.ROLES: tuple((name, max(0, minimum - counts[name])) for name, minimum in found)}


def as_group(composite: Mapping[str, Any], children: Sequence[Mapping[str, Any]]) -> JSON:
    """The root gang composite as the loop's group (see the module's docstring)."""
    spec = composite.get("spec") or {}
    found = tuple(sorted((role_name(c), role_minimum(c)) for c in children if not c["metadata"].get("deletionTimestamp")))
    wanted = int(spec["schedulingPolicy"]["gang"]["minGroupCount"])
    # with fewer children than minGroupCount it waits: each child still missing is a role of 1 with no members
    found += tuple((f"(child {i} of minGroupCount {wanted}, not created)", 1) for i in range(len(found) + 1, wanted + 1))
    group_spec: JSON = {
        "schedulingPolicy": {"gang": {"minCount": max(1, sum(m for _, m in found))}},
        "disruptionMode": spec.get("disruptionMode") or {"all": {}},
        **{k: spec[k] for k in _COPIED if k in spec},
    }
    return {**composite, "kind": keys.COMPOSITE_KIND, "spec": group_spec, keys.ROLES: found}


def groups(podgroups: Iterable[Mapping[str, Any]], composites: Iterable[Mapping[str, Any]]) -> list[JSON]:
    """The loop's groups: every PodGroup without a gang composite over it, then every root gang composite."""
    podgroups, composites = list(podgroups), list(composites)
    roots = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in composites if gang(c) and not parent(c)}
    children: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    own: list[JSON] = []
    for group in podgroups:
        above = parent(group)
        key = (group["metadata"]["namespace"], above or "")
        if above is not None and key in roots:
            children[key].append(group)
        elif above is None or keys.ROLE_LABEL not in (group["metadata"].get("labels") or {}):
            own.append(group)  # type: ignore[arg-type]
        # else a role Phalanx made for an owner, whose composite is not (or no longer) here: never a gang of its own,
        # which would count all the owner's pods against one role's minimum

    made = [as_group(c, children[(c["metadata"]["namespace"], c["metadata"]["name"])]) for c in composites if gang(c) and not parent(c)]
    return own + made


def as_written(group: Mapping[str, Any], answer: JSON) -> JSON:
    """The API server's answer to a write of `group`, as the loop's group again: a composite's spec and roles are
    the loop's reading of it and its children, not the composite's own."""
    if not is_composite(group):
        return answer
    return {**answer, "kind": keys.COMPOSITE_KIND, "spec": group["spec"], keys.ROLES: group[keys.ROLES]}


class Groups:
    """The loop's groups (`groups`) over the PodGroups and CompositePodGroups informers, made again only when
    either store was written; `written` moves with both."""

    def __init__(self, podgroups: Any, composites: Any) -> None:
        self.podgroups = podgroups
        self.composites = composites
        self._plain = podgroups.listen("groups/plain", _Plain)
        self._kept: tuple[Any, list[JSON]] | None = None
        self._made: dict[str, tuple[Any, JSON]] = {}
        """Composite uid -> (its and its children's versions, the group made of them): the same object while neither
        was written, so what is kept by identity downstream stays kept."""

    @property
    def written(self) -> tuple[Any, Any]:
        return (self.podgroups.written, self.composites.written)

    def items(self) -> list[JSON]:
        written = self.written
        if self._kept is not None and self._kept[0] == written:
            return self._kept[1]
        if not self._plain.children and not self.composites.store:
            # no composite and no child of one (every gang of Jobs): each PodGroup is a group, in the store's order,
            # taken as the watch keeps them instead of looked through after each of the burst's PodGroup writes
            self._made, self._kept = {}, (written, list(self._plain.groups.values()))
            return self._kept[1]
        made = groups(self.podgroups.items(), self.composites.items())
        out, kept = [], {}
        for group in made:
            if not is_composite(group):
                out.append(group)
                continue
            uid = group["metadata"]["uid"]
            version = (group["metadata"].get("resourceVersion"), group[keys.ROLES])
            before = self._made.get(uid)
            if before is not None and before[0] == version:
                group = before[1]
            kept[uid] = (version, group)
            out.append(group)
        self._made = kept
        self._kept = (written, out)
        return out


class _Plain:
    """The PodGroups informer's listener for `Groups`: the PodGroups with no parent, in the store's order, and how
    many have one."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], JSON] = {}
        self.children = 0

    def put(self, before: JSON | None, after: JSON | None) -> None:
        obj = after if after is not None else before
        if obj is None:
            return
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        self.children += (after is not None and parent(after) is not None) - (before is not None and parent(before) is not None)
        if after is not None and parent(after) is None:
            self.groups[key] = after
        else:
            self.groups.pop(key, None)

    def rebuild(self, store: dict[tuple[str, str], JSON]) -> None:
        self.groups = {key: group for key, group in store.items() if parent(group) is None}
        self.children = len(store) - len(self.groups)
