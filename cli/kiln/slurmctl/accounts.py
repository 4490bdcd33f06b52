"""What slurmdbd holds for the cluster, read on the controller with the same sacctmgr commands
the slurm_dbd role reads with (kiln.parsers.sacctmgr.reads): `kiln plan --live` compares it
with kiln_slurm.accounting (kiln.accounting)."""

from __future__ import annotations

from kiln.inventory import Cluster
from kiln.parsers.sacctmgr import Database, parse_database, reads
from kiln.slurmctl.remote import Controller


def held_accounting(cluster: Cluster, controller: Controller | None = None) -> Database:
    """The QoS, accounts, associations and users slurmdbd holds for `cluster`; OperationFailed
    in sacctmgr's words when it does not answer (slurmdbd down, accounting not set up yet)."""
    controller = controller or Controller(cluster, root=True)
    commands = reads(cluster.name)
    steps = controller.run(list(commands.values()))
    return parse_database({kind: step.stdout for kind, step in zip(commands, steps, strict=True)})
