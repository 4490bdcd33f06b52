"""What a slurm.conf change needs: nothing, `scontrol reconfigure`, or a daemon restart.

Partition changes take effect with a reconfigure (running jobs keep running); changes to
nodes, hosts, ports or plugins need slurmctld and slurmd restarted (Slurm 22.05+).
"""

from __future__ import annotations

NONE, RECONFIGURE, RESTART = "none", "reconfigure", "restart"


def _settings(text: str) -> tuple[list[str], list[str]]:
    partitions, others = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        (partitions if line.startswith("PartitionName=") else others).append(line)
    return partitions, others


def slurm_conf_action(old: str | None, new: str) -> str:
    """The action a change from `old` (None: no file yet) to `new` slurm.conf needs."""
    if old is None:
        return RESTART
    old_partitions, old_others = _settings(old)
    new_partitions, new_others = _settings(new)
    if old_others != new_others:
        return RESTART
    if old_partitions != new_partitions:
        return RECONFIGURE
    return NONE
