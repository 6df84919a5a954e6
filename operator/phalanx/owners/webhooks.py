"""What the kinds' Kopf webhook handlers share."""

from __future__ import annotations

from typing import Any


def merge_into(target: Any, source: dict[str, Any]) -> None:
    """A mutation's merge patch into Kopf's patch, nested keys merged, not replaced."""
    for key, value in source.items():
        if isinstance(value, dict):
            target.setdefault(key, {})
            merge_into(target[key], value)
        else:
            target[key] = value
