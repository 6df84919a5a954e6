"""Kopf handlers. Each module registers its handlers on import; each handler parses, delegates, writes, reports."""

from phalanx.controllers import admission, jobs

__all__ = ["admission", "jobs"]
