"""Slurm's topology/block from the nodes' multi-node NVLink domains (kiln_nvlink_domain): one
block per domain (an NVL72 rack: 18 trays of 4 GPUs behind its NVLink switches), so a job
placed with `--segment` keeps its nodes inside one domain.

    topology = nvlink_blocks(cluster)
    topology.blocks    # Block(name="nvl-rack01", domain="rack01", nodes=("gb001", ...))
    topology.sizes     # BlockSizes: the base block, then aggregates of 2, 4, ... blocks

What slurmctld 24.11 accepts was read from it (docs/fabric.md): a block with fewer nodes than
the base block is fatal at start ("children count lower than bblock_node_cnt"), so the base is
the smallest domain unless kiln_slurm.block_base says less. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.inventory import Cluster


@dataclass(frozen=True, slots=True)
class Block:
    name: str  # BlockName in topology.conf
    domain: str  # the kiln_nvlink_domain it stands for
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BlockTopology:
    blocks: tuple[Block, ...]
    base: int  # nodes in a base block
    sizes: tuple[int, ...]  # BlockSizes

    @property
    def spare(self) -> int:
        """Nodes the smallest block can lose (a drained tray) and still hold a base block."""
        return min((len(b.nodes) for b in self.blocks), default=0) - self.base


def block_name(domain: str) -> str:
    """A BlockName for a domain: 'nvl-' and the domain with anything but letters, digits, '_'
    and '-' made '-' (a ClusterUUID.CliqueId's dot too: Slurm reads block names as hostlists)."""
    return "nvl-" + re.sub(r"[^A-Za-z0-9_-]", "-", domain)


def block_sizes(base: int, blocks: int) -> tuple[int, ...]:
    """The base block, then the aggregates of 2, 4, ... base blocks the cluster holds."""
    sizes, count = [], 1
    while count <= max(1, blocks):
        sizes.append(base * count)
        count *= 2
    return tuple(sizes)


def nvlink_blocks(cluster: Cluster) -> BlockTopology:
    """A block per NVLink domain of the compute nodes, in the order the domains first appear;
    nodes without a domain are left out (validate refuses them under topology block)."""
    members: dict[str, list[str]] = {}
    for node in cluster.compute:
        if node.nvlink_domain:
            members.setdefault(node.nvlink_domain, []).append(node.name)
    names: dict[str, str] = {}
    blocks = []
    for domain, nodes in members.items():
        name = block_name(domain)
        name = name if name not in names.values() else f"{name}-{len(names)}"
        names[domain] = name
        blocks.append(Block(name, domain, tuple(nodes)))
    base = cluster.slurm.base_block([len(b.nodes) for b in blocks])
    return BlockTopology(tuple(blocks), base, block_sizes(base, len(blocks)))
