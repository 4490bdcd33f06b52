"""Munge key rotation: the slurm stage through kiln's engine with `munge_rotate_key: true`.

The munge role makes a new key on the controller from /dev/urandom, copies it to every node
(0400 munge:munge, never logged), restarts munge everywhere, then proves that a credential made
on the controller decodes on every node; a node where it does not fails, by name. So the run's
summary is the report: exit 0 means every node holds the new key and the check passed.
"""

from __future__ import annotations

from typing import Any

from kiln.inventory import Cluster
from kiln.plan.stages import select_stages
from kiln.runner.provision import Listener, ProvisionOptions, provision

EXTRAVARS = {"munge_rotate_key": True, "munge_cross_check": True}


def rotate_munge_key(cluster: Cluster, *, listener: Listener | None = None) -> dict[str, Any]:
    """Rotate the key on every node of the cluster; the provision summary, with `rotated`."""
    options = ProvisionOptions(stages=select_stages("slurm"), extravars=dict(EXTRAVARS))
    summary = provision(cluster, options, listener=listener)
    summary["rotated"] = summary["exit_code"] == 0
    return summary
