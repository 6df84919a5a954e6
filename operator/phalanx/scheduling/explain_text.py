"""`phalanx explain` rendered: the `Explanation` as text for a person (`text`), or as JSON for tools (`as_json`).

The analysis is `scheduling.explanation`; this module only lays its rows out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from phalanx.scheduling.explain_view import Explanation

JSON = dict[str, Any]


def as_json(explanation: Explanation) -> JSON:
    return asdict(explanation)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=False)]
    lines = []
    for row in [header, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=False)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def text(e: Explanation) -> str:
    """At a glance: state and why first, then where (nodes), what preemption would take, members, conditions, events."""
    lines = [
        f"{e.kind} {e.namespace}/{e.job}  PodGroup {e.pod_group}",
        f"State:       {e.state}: {e.summary}",
        f"Gang:        minCount {e.min_count}, {e.members} members, {e.bound} bound; priority {e.priority}; disruptionMode {e.disruption_mode}"
        + (f"; topology {e.topology}" if e.topology else ""),
        f"Held below minCount: {e.devices_below_min_count} device(s)",
    ]
    if e.others:
        lines.append(f"Also:        {e.kind} {e.job}'s other groups: {', '.join(e.others)} (`phalanx explain NAME` for one)")
    if e.roles:
        lines.append(
            "Roles:       " + ", ".join(f"{r.name}: minCount {r.min_count}, {r.members} members, {r.bound} bound" for r in e.roles)
        )
    for i, h in enumerate(e.holders):
        lines.append(f"{'Held by:' if i == 0 else '':<13}{h.held} of {h.total} {h.resource} held by {h.holder}, priority {h.priority}")
    if e.to_run:
        lines.append(f"To run:      {', or '.join(e.to_run)}")
    if e.job_pods:
        lines.append(f"{e.kind + ':':<13}{e.job_pods}")
    if e.queue:
        lines.append(f"Queue:       {e.queue}")
    if e.plan is not None:
        p = e.plan
        lines.append(f"Plan:        {p.fit} of {p.members} members fit (minCount {p.min_count})")
        if p.shortages:
            lines.append("Short:")
            lines += _table(
                ["RESOURCE", "NEEDED", "FREE", "TOTAL", "SHORT"],
                [[s.resource, str(s.needed), str(s.free), str(s.total), str(s.needed - s.free)] for s in p.shortages],
            )
        for reason, count in p.blocked:
            lines.append(f"Excluded:    {count} {reason}")
        for rule in p.unmodelled:
            lines.append(f"Not judged:  {rule}")
        lines.append("Nodes:")
        wants_devices = any(n.devices for n in p.nodes) or p.network_devices
        lines += _table(
            ["NODE", "FREE", "EXCLUDED BY"],
            [
                [
                    n.name,
                    " ".join(
                        ([f"devices={n.devices_free}/{n.devices}"] if wants_devices and n.devices else [])
                        + [f"{k}={v}" for k, v in n.free.items()]
                    )
                    or "-",
                    n.excluded_by or "-",
                ]
                for n in p.nodes
            ],
        )
        if p.network_devices:
            lines.append(f"Network-attached devices: {p.network_devices_free}/{p.network_devices} free")
        if p.placements:
            lines.append("Placement:")
            lines += _table(["MEMBER", "NODE"], [list(pl) for pl in p.placements])
    if e.preemption is not None:
        pre = e.preemption
        if pre.under_way:
            standing = pre.victims[0].pods if pre.victims else ()
            lines.append(
                f"Preemption:  under way; {len(standing)} victim(s) still standing" + (f": {', '.join(standing)}" if standing else "")
            )
        elif pre.reason is not None:
            lines.append(f"Preemption:  would not help: {pre.reason}")
        else:
            pods = sum(len(v.pods) for v in pre.victims)
            lines.append(f"Preemption:  would evict {pods} pod(s) in {len(pre.victims)} unit(s) (dry run; the operator does it next cycle)")
            lines += _table(["VICTIM", "PRIORITY", "PODS"], [[v.victim, str(v.priority), ", ".join(v.pods)] for v in pre.victims])
    if e.losses:
        lines.append("Lost:")
        lines += _table(["MEMBER", "CAUSE"], [[loss.member, loss.cause] for loss in e.losses])
    lines.append("Members:")
    lines += (
        _table(["NAME", "STATE", "NODE", "DEVICES"], [[m.name, m.state, m.node or "-", ", ".join(m.devices) or "-"] for m in e.member_rows])
        if e.member_rows
        else ["  (none)"]
    )
    lines.append("Conditions:")
    lines += (
        _table(["TYPE", "STATUS", "REASON", "MESSAGE"], [[c.type, c.status, c.reason, c.message] for c in e.conditions])
        if e.conditions
        else ["  (none)"]
    )
    lines.append("Events:")
    lines += (
        _table(["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"], [[v.age, v.type, v.reason, v.object, v.message] for v in e.events])
        if e.events
        else ["  (none)"]
    )
    return "\n".join(lines) + "\n"
