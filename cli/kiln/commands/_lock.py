"""The cluster's lock for a command that changes the cluster, its notes on stderr.

    with cluster_lock(cluster, "drain", read=False) as shared:   # exit 3 naming the holder
        ...                                                       # if another run holds it

The holding itself (every command the same lock, a loss found and turned into exit 3) is
kiln.state.hold; kiln provision holds it inside its use case (kiln.provision).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kiln.console import err, safe

if TYPE_CHECKING:  # kiln.state loads the inventory model and SSH: not on the path of --help
    from kiln.inventory import Cluster
    from kiln.state import SharedState


def say(line: str) -> None:
    """A note of the lock (which backend, and why) for the operator, on stderr."""
    err.print(safe(line))


@contextmanager
def cluster_lock(
    cluster: Cluster, command: str, *, run_id: str | None = None, read: bool = True
) -> Iterator[SharedState]:
    """Hold the cluster's lock for `kiln <command>`; its notes go to stderr."""
    from kiln.state.hold import hold_cluster

    with hold_cluster(cluster, command, note=say, run_id=run_id, read=read) as shared:
        yield shared
