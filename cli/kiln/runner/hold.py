"""The run's hold on its lock, asked before each stage and shard starts (the stop-check hook).

A lock can be lost while a run works: the controller's holder shell killed, the lock file
removed, the connection gone (kiln.state). The runner cannot import kiln.state; it asks the lock
the caller handed it (anything with `check()` raising a KilnError) and stops before its next
action when the answer is no, the way a failure threshold stops it.
"""

from __future__ import annotations

from typing import Protocol

from kiln.errors import KilnError
from kiln.records.lock import LockInfo


class Hold(Protocol):
    info: LockInfo | None
    cleared_stale: LockInfo | None

    def check(self) -> None:
        """Raise a KilnError unless the run still holds its lock."""


class StopCheck:
    """`why()`: None while the run holds its lock; once lost, why (and it stays lost)."""

    def __init__(self, hold: Hold | None) -> None:
        self.hold = hold
        self.lost: str | None = None

    def why(self) -> str | None:
        if self.lost is None and self.hold is not None:
            try:
                self.hold.check()
            except KilnError as error:
                self.lost = error.message
        return self.lost
