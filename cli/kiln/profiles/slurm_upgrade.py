"""A Slurm upgrade in the order Slurm documents (https://slurm.schedmd.com/upgrades.html): the
accounting database backed up, slurmdbd upgraded with its database conversion run in the
foreground, slurmctld's state saved and slurmctld upgraded, then slurmd in rolling batches.

`upgrade_plan` says which of those steps a provision takes for the versions the hosts run
(`kiln plan --live`); the slurm_upgrade role takes them, judging each host with the same
`kiln.profiles.slurm.installed`. Nothing here prints or reaches a host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from kiln.profiles._common import Model
from kiln.profiles.slurm import DEFAULT_PLATFORM, SlurmSource, installed, release_of

StepKind = Literal["database-backup", "slurmdbd", "slurmctld-state", "slurmctld", "slurmd"]

# Where the slurm_upgrade role keeps each upgrade's backups on the controller.
BACKUP_ROOT = "/var/lib/kiln/slurm-upgrade"


class UpgradeStep(Model):
    kind: StepKind
    hosts: list[str]
    detail: str


class UpgradePlan(Model):
    to: str | None  # the version the slurm stage installs
    steps: list[UpgradeStep]  # in the order they run; empty: nothing to upgrade
    problems: list[str]  # host: why the slurm stage refuses (a downgrade, a jump too far)

    @property
    def upgrading(self) -> bool:
        return bool(self.steps)


def backup_dir(old: str, new: str) -> str:
    """Where one upgrade's backups go: one directory per (from, to) pair, so a second upgrade
    never overwrites the first's."""
    return f"{BACKUP_ROOT}/{old}-to-{new}"


def _batches(hosts: Sequence[str], size: int) -> list[list[str]]:
    size = max(1, size)
    return [list(hosts[at : at + size]) for at in range(0, len(hosts), size)]


def upgrade_plan(
    readings: Mapping[str, Mapping[str, str | None]],
    *,
    controller: str,
    compute: Sequence[str],
    declared: str | None,
    source: SlurmSource,
    platforms: Mapping[str, str],
    accounting: bool,
    batch_size: int,
) -> UpgradePlan:
    """The upgrade steps for `readings` (host -> daemon -> its `-V` output, None or absent where
    it is not installed): an older daemon within Slurm's window is upgraded in place, in order;
    a newer one or one beyond the window is a problem (and nothing is upgraded). `platforms`:
    host -> its kiln_os (the default platform where absent)."""
    judged = {
        host: installed(dict(daemons), declared, source, platforms.get(host, DEFAULT_PLATFORM))
        for host, daemons in readings.items()
    }
    problems = [f"{host}: {problem}" for host, j in judged.items() for problem in j.problems]
    to = next((j.installs for j in judged.values() if j.installs), None)
    if problems or to is None:
        return UpgradePlan(to=to, steps=[], problems=problems)
    steps: list[UpgradeStep] = []
    head = judged.get(controller)
    older = head.older if head else {}
    if accounting and "slurmdbd" in older:
        old = release_of(older["slurmdbd"])
        steps.append(
            UpgradeStep(
                kind="database-backup",
                hosts=[controller],
                detail=f"slurmdbd stopped; mysqldump of the accounting database into "
                f"{backup_dir(older['slurmdbd'], to)}/",
            )
        )
        steps.append(
            UpgradeStep(
                kind="slurmdbd",
                hosts=[controller],
                detail=f"slurmdbd {older['slurmdbd']} -> {to}: the database converted from "
                f"{old}'s format by slurmdbd run in the foreground, then started by systemd",
            )
        )
    if "slurmctld" in older:
        steps.append(
            UpgradeStep(
                kind="slurmctld-state",
                hosts=[controller],
                detail=f"slurmctld stopped; its StateSaveLocation archived into "
                f"{backup_dir(older['slurmctld'], to)}/",
            )
        )
        steps.append(
            UpgradeStep(
                kind="slurmctld",
                hosts=[controller],
                detail=f"slurmctld {older['slurmctld']} -> {to}, started; running jobs keep "
                "running (the old slurmd and slurmstepd are within its window)",
            )
        )
    nodes = [host for host in compute if host in judged and "slurmd" in judged[host].older]
    if nodes:
        batches = _batches(nodes, batch_size)
        steps.append(
            UpgradeStep(
                kind="slurmd",
                hosts=nodes,
                detail=f"slurmd -> {to} on {len(nodes)} node(s) in {len(batches)} rolling "
                f"batch(es) of up to {max(1, batch_size)}; running jobs keep running",
            )
        )
    return UpgradePlan(to=to, steps=steps, problems=[])


def backup_dir_filter(old: object, new: object) -> str:
    """The roles' kiln_slurm_backup_dir filter: `backup_dir` with Ansible's values."""
    return backup_dir(str(old), str(new))


FILTERS = {"kiln_slurm_backup_dir": backup_dir_filter}
