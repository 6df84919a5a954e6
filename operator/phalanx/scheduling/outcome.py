"""How a release ends when it does not end released: what `reserve`, `gates` and `deallocation` raise, and what the
loop (`attempt`, `loop`) tells apart.

- `ReleaseAborted`: no member was released and every allocation of the reservation has been undone; the group says
  why and is planned again.
- `GatesRefused`: some members were released and another was refused; the group is torn down as a unit.
- `NotLeading`: this replica may have lost its Lease mid-release; it writes nothing more and the next leader
  finishes or undoes the release from its record.
"""

from __future__ import annotations

from phalanx.api import schema
from phalanx.planner.model import DeviceId


class ReleaseAborted(Exception):
    """The plan can no longer be completed; its reservation has been rolled back and the group will be planned again."""

    def __init__(self, message: str, shared: frozenset[DeviceId] = frozenset()) -> None:
        super().__init__(message)
        self.shared = shared
        """Devices of ours another claim also holds: undoing ours opens a hole in kube-scheduler's view of them."""


class NotLeading(Exception):
    """This replica may have lost its Lease mid-release: it writes nothing more, not even a rollback. The record
    says where it stopped, and the next leader finishes or undoes it, as after a crash."""


class GatesRefused(Exception):
    """Some gates were lifted and others refused: the group is released in part and must be torn down."""

    def __init__(self, message: str, reservation: schema.Reservation) -> None:
        super().__init__(message)
        self.reservation = reservation
