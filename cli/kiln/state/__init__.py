"""State shared by every runner of a cluster: the provision lock and the cluster's state, kept on
the Slurm controller (docs/gitops.md, "Where state lives").

    with SharedState(cluster, run_id=run_id) as shared:   # exit 3 naming the holder if locked
        joined = shared.joined()
        ...
        shared.push_run(result.to_dict())
"""

from kiln.state.backend import (
    LockStatus,
    SharedState,
    controller_remote,
    lock_status,
    push_verdicts,
)
from kiln.state.controller import ControllerLock, StateUnavailable, probe, read_state

__all__ = [
    "ControllerLock",
    "LockStatus",
    "SharedState",
    "StateUnavailable",
    "controller_remote",
    "lock_status",
    "probe",
    "push_verdicts",
    "read_state",
]
