"""CEL for device selectors: compile once, refuse what costs too much, evaluate against one device.

The API server and the scheduler bound a selector's cost (Kubernetes'
CELSelectorExpressionMaxCost, 1,000,000, and a 10 KiB expression); a tenant
must not be able to make the planner, which runs every selector against many
devices, slower than that. The CEL library here (common-expression-language)
has no cost tracking, so the bound is an estimate made *before* evaluation
and never a clock: every token of the expression costs 1, and a token inside
a comprehension (all, exists, exists_one, map, filter) costs as many times as
the comprehension's range can have elements, nested ranges multiplying. A
list literal's range is its element count; any other range (a device's
attributes or capacity, at most 32 entries, or what a map/filter over one
returns) counts as 32. A selector over the limit is refused before it runs,
with an error naming the limit; evaluation time is not bounded otherwise. A
quantity literal out of Kubernetes' range (`quantity("1e999999")`) is
refused at compile time too, as it could never evaluate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import cel

from phalanx.planner import quantity

MAX_COST = 1_000_000
"""Kubernetes' CELSelectorExpressionMaxCost."""
MAX_LENGTH = 10 * 1024
"""Kubernetes' CELSelectorExpressionMaxLength."""
UNKNOWN_RANGE = 32
"""A device has at most 32 attributes and capacities together: the largest range that is not a literal."""
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})

_TOKEN = re.compile(r"""\s*(?:("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|([A-Za-z_][A-Za-z0-9_]*)|([0-9][0-9.eE+\-a-zA-Z]*)|(.))""")


_QUANTITY = re.compile(r"""quantity\(\s*("[^"]*"|'[^']*')\s*\)""")


class TooCostly(ValueError):
    """A selector whose estimated cost exceeds the limit: refused before it runs."""


@dataclass
class _Group:
    opener: str
    items: list[Any] = field(default_factory=list)
    elements: int = 0


def _tokens(expression: str) -> list[str]:
    out = []
    for match in _TOKEN.finditer(expression):
        token = next(t for t in match.groups() if t is not None) if any(match.groups()) else ""
        if token.strip():
            out.append(token)
    return out


def _tree(tokens: list[str]) -> _Group:
    root = _Group("")
    stack = [root]
    closer = {")": "(", "]": "[", "}": "{"}
    for token in tokens:
        top = stack[-1]
        if token in "([{":
            group = _Group(token)
            top.items.append(group)
            stack.append(group)
        elif token in closer:
            if len(stack) > 1:
                top.elements += bool(top.items) and top.items[-1] != ","
                stack.pop()
        else:
            if token == "," and top.opener:
                top.elements += 1
            top.items.append(token)
    return root


def _cost(group: _Group, factor: int, sizes: dict[int, int]) -> int:
    """Tokens weighted by the ranges they repeat over; `sizes` remembers each group's range size, by id."""
    total = 0
    items = group.items
    for i, item in enumerate(items):
        if not isinstance(item, _Group):
            total += factor
            continue
        macro = item.opener == "(" and i >= 2 and items[i - 1] in MACROS and items[i - 2] == "."
        if not macro:
            follows_value = i > 0 and (isinstance(items[i - 1], _Group) or items[i - 1][0].isalnum() or items[i - 1][0] in "\"'_")
            literal = item.opener == "[" and not follows_value  # `x[...]` indexes x, whose entries are not counted here
            sizes[id(item)] = item.elements if literal else UNKNOWN_RANGE
            total += factor + _cost(item, factor, sizes)
            continue
        receiver = items[i - 3] if i >= 3 else None
        size = sizes.get(id(receiver), UNKNOWN_RANGE) if isinstance(receiver, _Group) else UNKNOWN_RANGE
        sizes[id(item)] = size if items[i - 1] in ("map", "filter") else 1
        total += factor * size + _cost(item, factor * max(size, 1), sizes)
    return total


def estimated_cost(expression: str) -> int:
    """An upper estimate of the work one evaluation does (see the module docstring)."""
    return _cost(_tree(_tokens(expression)), 1, {})


def _compare(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def context() -> cel.Context:
    """Kubernetes' CEL quantity library over integers: capacities are exact integers here."""
    ctx = cel.Context()
    ctx.add_function("quantity", lambda text: quantity.amount("", text))
    ctx.add_function("compareTo", _compare)
    ctx.add_function("isGreaterThan", lambda a, b: a > b)
    ctx.add_function("isLessThan", lambda a, b: a < b)
    ctx.add_function("asInteger", lambda a: int(a))
    ctx.add_function("asApproximateFloat", lambda a: float(a))
    return ctx


def compile_selector(expression: str) -> Any:
    """A compiled program, or TooCostly/ValueError naming why the expression is refused."""
    if len(expression) > MAX_LENGTH:
        raise TooCostly(f"expression is {len(expression)} characters, over the limit of {MAX_LENGTH}")
    cost = estimated_cost(expression)
    if cost > MAX_COST:
        raise TooCostly(f"estimated cost {cost} exceeds the limit of {MAX_COST}; shorten the lists it iterates over")
    for literal in _QUANTITY.findall(expression):
        try:
            quantity.parse(literal[1:-1])
        except ValueError as exc:
            raise ValueError(f"quantity({literal}): {exc}") from None
    return cel.compile(expression)
