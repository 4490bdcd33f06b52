"""The one vocabulary of a host's result in a stage of a run, and its ranking.

A provision run's summary (`hosts`: host -> stage -> status, and each stage entry's per-host
`status`), the cluster's state document (`last_result`, `stages`) and the drift records all
spell a host's result with these words; every other module names them through `HostStatus`,
never as bare strings (tests/unit/test_code_rules.py). A `StrEnum`, so a member is its word:
JSON, f-strings and comparisons with the plain strings a record was read back as are unchanged.

Members are declared worst first, and that order is the ranking wherever kiln keeps one status
for a host seen in several batches or stages (`worst`): failed, unreachable, aborted (reached but
stopped before it finished the stage), not_run (never reached), changed, ok.

Not these words: a stage's own status (ansible-runner's successful / failed / canceled, and
kiln's skipped / error / not_started), and a command's outcome over SSH
(kiln.fleet.CommandOutcome), which uses some of the same words with another meaning.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class HostStatus(StrEnum):
    """A host's result in one stage, worst first."""

    FAILED = "failed"
    UNREACHABLE = "unreachable"
    ABORTED = "aborted"
    NOT_RUN = "not_run"
    CHANGED = "changed"
    OK = "ok"


RANKED: tuple[HostStatus, ...] = tuple(HostStatus)  # worst first
GOOD = frozenset({HostStatus.OK, HostStatus.CHANGED})  # the stage finished on the host
BAD = frozenset({HostStatus.FAILED, HostStatus.UNREACHABLE})  # it counts against max_fail
UNFINISHED = frozenset({HostStatus.NOT_RUN, HostStatus.ABORTED})  # never reached, or stopped
_INDEX: dict[str, int] = {status: index for index, status in enumerate(RANKED)}


def rank(status: str) -> int:
    """0 for the worst status, higher for better ones; a word kiln does not know ranks below
    every known one (it is no evidence that the stage went well)."""
    return _INDEX.get(status, -1)


def worst(statuses: Iterable[str]) -> str:
    """The worst of `statuses` (not empty), by the ranking above; the first on a tie."""
    return min(statuses, key=rank)


def worse(status: str, than: str) -> bool:
    """Whether `status` ranks strictly below `than`."""
    return rank(status) < rank(than)
