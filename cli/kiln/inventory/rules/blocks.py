"""Rules about `kiln_slurm.topology: block`: every compute node names its NVLink domain
(kiln_nvlink_domain), no domain is smaller than the base block (slurmctld 24.11 will not start:
"Block configuration (...) children count lower than bblock_node_cnt"), and a warning where a
single drained node leaves a domain unable to hold a base block (a job's --segment of that
size then cannot run there until the node is back)."""

from __future__ import annotations

from kiln.inventory.context import COMPUTE, InventoryContext
from kiln.inventory.findings import FindingCollector
from kiln.inventory.schema import SlurmSpec

KEY = "kiln_nvlink_domain"


def nvlink_domains_make_the_blocks(ctx: InventoryContext, out: FindingCollector) -> None:
    slurm, _ = ctx.cluster_value("kiln_slurm", SlurmSpec())
    if slurm is None or slurm.topology != "block":
        return
    where = ctx.written_at("kiln_slurm", "topology")
    domains: dict[str, list[str]] = {}
    missing = []
    for name in ctx.membership.get(COMPUTE, []):
        domain = ctx.value(ctx.hosts[name], KEY)
        if domain:
            domains.setdefault(str(domain), []).append(name)
        else:
            missing.append(name)
    if missing:
        out.error(
            f"kiln_slurm.topology is block but {len(missing)} compute node(s) name no "
            f"{KEY}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} (Slurm "
            "schedules a node of no block nowhere)",
            origin=ctx.declared_at(missing[0]) or where,
            key=KEY,
            hint=f"set {KEY} on every compute node: its NVL72 rack (nvidia-smi -q's "
            "ClusterUUID.CliqueId), or topology racks",
        )
    if not domains:
        return
    base = slurm.base_block([len(nodes) for nodes in domains.values()])
    for domain, nodes in domains.items():
        if len(nodes) < base:
            out.error(
                f"NVLink domain {domain} has {len(nodes)} compute node(s), fewer than the base "
                f"block of {base}: slurmctld refuses to start (children count lower than "
                "bblock_node_cnt)",
                origin=ctx.written_at("kiln_slurm", "block_base") or where,
                key="kiln_slurm.block_base",
                hint=f"kiln_slurm.block_base: {len(nodes)} or less",
            )
    smallest = min(len(nodes) for nodes in domains.values())
    if smallest == base and base > 1:
        out.warning(
            f"the base block is {base} node(s), as many as the smallest NVLink domain holds: "
            f"one drained node there and a job with --segment={base} cannot run in it",
            origin=ctx.written_at("kiln_slurm", "block_base") or where,
            key="kiln_slurm.block_base",
            hint=f"kiln_slurm.block_base: {base - 1} keeps a spare node in every domain",
        )
