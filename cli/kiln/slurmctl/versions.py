"""What each Slurm host runs, read live, and the in-place upgrade it needs: `kiln plan --live`
shows the steps (kiln.profiles.slurm_upgrade) the slurm stage would take in Slurm's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.fleet import CommandOutcome, ExecResult, run_as_root, run_command
from kiln.inventory import Cluster
from kiln.inventory.batches import hosts_per_batch
from kiln.profiles.slurm import DAEMON_VERSIONS, daemon_lines
from kiln.profiles.slurm_upgrade import UpgradePlan, upgrade_plan

Runner = Callable[..., ExecResult]  # kiln.fleet.run_command's signature


@dataclass(frozen=True)
class SlurmUpgrade:
    plan: UpgradePlan
    unread: dict[str, str]  # host -> why its versions could not be read (left out of the plan)


def installed_daemons(
    cluster: Cluster, *, runner: Runner = run_command
) -> tuple[dict[str, dict[str, str | None]], dict[str, str]]:
    """(host -> daemon -> its `-V` output, host -> why it could not be read) for every Slurm
    host of `cluster`, read as root in one fan-out."""
    hosts = [node for node in cluster.nodes if node.is_controller or node.is_compute]
    result = run_as_root(hosts, DAEMON_VERSIONS, runner=runner)
    readings: dict[str, dict[str, str | None]] = {}
    unread: dict[str, str] = {}
    for answer in result.results:
        if answer.status is CommandOutcome.OK:
            readings[answer.name] = dict(daemon_lines(answer.stdout))
        else:
            unread[answer.name] = answer.error or answer.stderr.strip()[-200:] or str(answer.status)
    return readings, unread


def slurm_upgrade(cluster: Cluster, *, runner: Runner = run_command) -> SlurmUpgrade:
    """The in-place upgrade the slurm stage would run for what the hosts run now."""
    readings, unread = installed_daemons(cluster, runner=runner)
    controller = cluster.controllers[0]
    compute = [node.name for node in cluster.compute if not node.is_controller]
    plan = upgrade_plan(
        readings,
        controller=controller.name,
        compute=compute,
        declared=cluster.declared_slurm(controller),
        source=cluster.slurm.source,
        platforms={node.name: node.platform for node in cluster.nodes},
        accounting=cluster.slurm.accounting_on,
        batch_size=hosts_per_batch(cluster.rollout.batch_size, max(1, len(compute))),
    )
    return SlurmUpgrade(plan, unread)
