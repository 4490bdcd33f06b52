"""Rules about the written kiln_partitions, each reported at its partition's line.

All but the last are called once per partition (rules.EachPartition); without kiln_partitions
kiln makes one default partition of every compute node, and there is nothing to judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.inventory.context import COMPUTE, InventoryContext
from kiln.inventory.findings import FindingCollector, Origin, suggest
from kiln.inventory.schema import SAFE_TOKEN, PartitionSpec
from kiln.inventory.values import unsafe_value

KEY = "kiln_partitions"


@dataclass(frozen=True, slots=True)
class WrittenPartition:
    index: int  # its place in the kiln_partitions list
    spec: PartitionSpec
    origin: Origin | None  # its list item's line


def name_is_safe(ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector) -> None:
    """The name reaches slurm.conf and scontrol command lines."""
    if not SAFE_TOKEN.match(partition.spec.name):
        unsafe_value(out, f"{KEY}.name", partition.spec.name, partition.origin)


def defined_once(ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector) -> None:
    earlier = {spec.name for spec in ctx.partition_specs[: partition.index]}
    if partition.spec.name in earlier:
        out.error(
            f"partition '{partition.spec.name}' is defined twice", origin=partition.origin, key=KEY
        )


def groups_have_hosts(
    ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector
) -> None:
    name = partition.spec.name
    for group in partition.spec.groups:
        if group not in ctx.raw.groups:
            out.error(
                f"partition '{name}' names group '{group}', which the inventory does not have",
                origin=partition.origin,
                key=KEY,
                hint=suggest(group, ctx.raw.groups),
            )
        elif not ctx.membership.get(group):
            out.error(
                f"partition '{name}' names group '{group}', which has no hosts",
                origin=partition.origin,
                key=KEY,
                hint="add hosts to the group or drop it from the partition",
            )


def hosts_exist(ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector) -> None:
    for host in partition.spec.nodes:
        if host not in ctx.hosts:
            out.error(
                f"partition '{partition.spec.name}' names host '{host}', which the inventory "
                "does not have",
                origin=partition.origin,
                key=KEY,
                hint=suggest(host, ctx.hosts),
            )


def holds_something(
    ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector
) -> None:
    if not partition.spec.groups and not partition.spec.nodes:
        out.error(
            f"partition '{partition.spec.name}' holds no groups and no nodes",
            origin=partition.origin,
            key=KEY,
        )


def holds_compute_nodes_only(
    ctx: InventoryContext, partition: WrittenPartition, out: FindingCollector
) -> None:
    compute = set(ctx.membership.get(COMPUTE, []))
    outsiders = [n for n in ctx.partition_members(partition.spec) if n not in compute]
    if outsiders:
        out.error(
            f"partition '{partition.spec.name}' holds hosts that are not compute "
            f"nodes: {', '.join(outsiders[:5])}",
            origin=partition.origin,
            key=KEY,
            hint=f"only {COMPUTE} hosts run jobs",
        )


def one_default(ctx: InventoryContext, out: FindingCollector) -> None:
    defaults = [spec.name for spec in ctx.partition_specs or [] if spec.default]
    if len(defaults) > 1:
        out.error(
            f"more than one default partition: {', '.join(defaults)}",
            origin=ctx.written_at(KEY),
            key=KEY,
            hint="mark one default: true",
        )
