"""The cluster-wide files a plan carries, rendered once from the model.

slurm.conf, gres.conf, cgroup.conf and topology.conf (what `kiln plan --output` writes and the
slurm roles install), the Prometheus targets file when kiln_monitoring is on (the monitoring
role installs it on the controllers), and /etc/hosts for every node: never built by contacting
every host.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kiln.fabric.blocks import nvlink_blocks
from kiln.fabric.topology import topology_from_capture
from kiln.inventory import Cluster
from kiln.render import render_template
from kiln.render.context import cluster_context, hosts_context
from kiln.render.file_sd import TARGETS_FILE, render_file_sd

GENERATED_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")


@dataclass(frozen=True, slots=True)
class GeneratedFile:
    name: str
    content: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def render_files(cluster: Cluster) -> tuple[GeneratedFile, ...]:
    # The switches as the fabric is cabled (kiln_slurm.ibnetdiscover_file), not racks; slurm.conf
    # switches the topology plugin on when that topology.conf holds a switch.
    fabric = topology_from_capture(cluster) if cluster.slurm.topology == "fabric" else None
    context = cluster_context(cluster, None if fabric is None else len(fabric.topology.switches))
    if cluster.slurm.topology == "block":  # a block per NVLink domain (kiln.fabric.blocks)
        context["kiln"]["blocks"] = nvlink_blocks(cluster)
    files = []
    for name in GENERATED_FILES:
        if name == "topology.conf" and fabric is not None:
            files.append(GeneratedFile(name, fabric.conf))
        else:
            files.append(GeneratedFile(name, render_template(f"{name}.j2", context)))
    if cluster.monitoring.enabled:  # the monitoring stage's Prometheus targets (file_sd)
        files.append(GeneratedFile(TARGETS_FILE, render_file_sd(cluster)))
    return tuple(files)


def render_etc_hosts(cluster: Cluster) -> GeneratedFile:
    """/etc/hosts for every node, rendered once (a shard's inventory holds only its hosts)."""
    return GeneratedFile("hosts", render_template("hosts.j2", hosts_context(cluster)))


def write_files(files: tuple[GeneratedFile, ...], directory: Path) -> list[str]:
    """Write the generated files; return the names whose content changed (or are new)."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for generated in files:
        target = directory / generated.name
        if not target.is_file() or target.read_text() != generated.content:
            changed.append(generated.name)
            target.write_text(generated.content)
    return changed
