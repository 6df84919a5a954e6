"""Kubernetes resource quantities as exact integers (cpu in millicores, everything else in units).

Bounded like apimachinery's resource.Quantity, which holds at most a 64-bit
value at an exponent it can represent: a quantity longer than MAX_LENGTH
characters or with an exponent beyond MAX_EXPONENT is refused before any
arithmetic, so `1e999999` or a 5,000-digit number costs nothing to reject.
"""

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
MAX_LENGTH = 64
MAX_EXPONENT = 40
"""Beyond 2^63 units at the largest suffix (Ei, about 10^37): no Kubernetes quantity reaches it."""


def parse(value: str | int | float) -> Decimal:
    text = str(value).strip()
    if len(text) > MAX_LENGTH:
        raise ValueError(f"quantity of {len(text)} characters exceeds the limit of {MAX_LENGTH}")
    match = _FORM.match(text)
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc
    if number and abs(number.adjusted()) > MAX_EXPONENT:
        raise ValueError(f"quantity {text!r} is out of range (magnitude 10^{number.adjusted()}, limit 10^{MAX_EXPONENT})")
    return number * Decimal(_SUFFIX[match.group(2) or ""])


def amount(resource: str, value: str | int | float) -> int:
    """The integer the scheduler compares: millicores for cpu, rounded up like the API server does."""
    scaled = parse(value) * (1000 if resource in MILLI else 1)
    return math.ceil(scaled)
