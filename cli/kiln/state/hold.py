"""The cluster's lock for a run that changes the cluster: one way to hold it, for all of them.

    with hold_cluster(cluster, "drain", note=print, read=False) as shared:  # exit 3 naming the
        ...                                                                 # holder if locked

provision, burnin, slurm rotate-munge-key, drain, resume and `unlock --force` all take the same
lock: SharedState (the local lock, then the controller's, per kiln_state.backend). A run that
loses it (its holder shell on the controller killed, the lock file removed, the connection gone)
stops before its next stage or shard (kiln.runner.hold); when the body ends, the lock is asked
once more (a lost lock stays lost, so this finds any loss during the body) and a loss turns the
run's end into EnvironmentProblem (exit 3) saying what happened, whatever the body returned or
raised. `note` receives the lines for the operator (which backend, and why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kiln.errors import EnvironmentProblem
from kiln.state.backend import SharedState

if TYPE_CHECKING:
    from kiln.inventory import Cluster


def _lost(shared: SharedState, command: str) -> EnvironmentProblem:
    why = "the lock was lost"
    try:
        shared.check()  # raises once lost, without asking the controller again
    except EnvironmentProblem as error:
        why = error.message
    return EnvironmentProblem(
        f"kiln {command} lost the cluster's lock and stopped: {why}",
        hint="nothing more was started once the loss was seen; another run may hold the lock "
        "now (kiln unlock shows it). Re-run when it is free; the run record says what ran.",
    )


@contextmanager
def hold_cluster(
    cluster: Cluster,
    command: str,
    *,
    note: Callable[[str], None],
    run_id: str | None = None,
    read: bool = True,
) -> Iterator[SharedState]:
    """Hold the cluster's lock for `kiln <command>`; its notes go to `note`."""
    with SharedState(cluster, run_id=run_id, command=command, read=read) as shared:
        for line in shared.notes:
            note(line)
        shown = len(shared.notes)
        try:
            yield shared
        except Exception as error:
            if shared.lost:
                raise _lost(shared, command) from error
            raise
        for line in shared.notes[shown:]:
            note(line)
        if not shared.still_held():  # asked once more: a loss is for good, so any during the body
            raise _lost(shared, command)
