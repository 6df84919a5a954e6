"""Kubernetes resource quantities as exact integers (cpu in millicores, everything else in units)."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_FORM = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
MILLI = {"cpu"}


def parse(value: str | int | float) -> Decimal:
    text = str(value).strip()
    match = _FORM.match(text)
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc
    return number * Decimal(_SUFFIX[match.group(2) or ""])


def amount(resource: str, value: str | int | float) -> int:
    """The integer the scheduler compares: millicores for cpu, rounded up like the API server does."""
    scaled = parse(value) * (1000 if resource in MILLI else 1)
    return math.ceil(scaled)
