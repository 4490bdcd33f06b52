"""The offline plan: stages in order, the hosts each touches, rolling batches, generated files.

Nothing here contacts a host; the plan is computed from the validated model alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from kiln.inventory import Cluster
from kiln.plan.stages import available_stages, stage_hosts
from kiln.render import render_template
from kiln.render.context import cluster_context
from kiln.render.hostlist import compress

GENERATED_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")


@dataclass(frozen=True, slots=True)
class StagePlan:
    name: str
    summary: str
    hosts: list[str]
    batches: list[list[str]]


@dataclass(frozen=True, slots=True)
class GeneratedFile:
    name: str
    content: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


@dataclass
class Plan:
    cluster: Cluster
    stages: list[StagePlan]
    files: list[GeneratedFile]
    changed_files: list[str] = field(default_factory=list)  # against --output, when given

    def to_dict(self) -> dict:
        return {
            "cluster": self.cluster.name,
            "inventory": str(self.cluster.inventory_dir),
            "versions": self.cluster.versions.model_dump(),
            "stages": [
                {
                    "name": s.name,
                    "summary": s.summary,
                    "host_count": len(s.hosts),
                    "hosts": compress(s.hosts),
                    "batches": [compress(b) for b in s.batches],
                }
                for s in self.stages
            ],
            "files": [
                {"name": f.name, "sha256": f.sha256, "lines": f.content.count("\n")}
                for f in self.files
            ],
            "changed_files": self.changed_files,
        }


def batch_count(batch_size: int | str, host_count: int) -> int:
    """Hosts per batch, as Ansible's `serial` computes it (a percentage rounds down, min 1)."""
    if isinstance(batch_size, str) and batch_size.endswith("%"):
        size = host_count * int(batch_size[:-1]) // 100
    else:
        size = int(batch_size)
    return max(1, min(size, host_count)) if host_count else 0


def split_batches(hosts: list[str], batch_size: int | str) -> list[list[str]]:
    size = batch_count(batch_size, len(hosts))
    return [hosts[i : i + size] for i in range(0, len(hosts), size)] if size else []


def render_files(cluster: Cluster) -> list[GeneratedFile]:
    context = cluster_context(cluster)
    files = []
    for name in GENERATED_FILES:
        if name == "topology.conf" and cluster.slurm.topology == "fabric":
            # The switches as the fabric is cabled (kiln_slurm.ibnetdiscover_file), not racks.
            from kiln.fabric.gather import topology_from_capture

            files.append(GeneratedFile(name, topology_from_capture(cluster).conf))
        else:
            files.append(GeneratedFile(name, render_template(f"{name}.j2", context)))
    return files


def render_etc_hosts(cluster: Cluster) -> GeneratedFile:
    """/etc/hosts for every node, rendered once (a shard's inventory holds only its hosts)."""
    return GeneratedFile("hosts", render_template("hosts.j2", cluster_context(cluster)))


def make_plan(cluster: Cluster, batch_size: int | str | None = None) -> Plan:
    batch_size = batch_size or cluster.rollout.batch_size
    stages = []
    for stage in available_stages():
        hosts = stage_hosts(stage, cluster.groups, [node.name for node in cluster.nodes])
        stages.append(StagePlan(stage.name, stage.summary, hosts, split_batches(hosts, batch_size)))
    return Plan(cluster, stages, render_files(cluster))


def write_files(plan: Plan, directory: Path) -> list[str]:
    """Write the generated files; return the names whose content changed (or are new)."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for generated in plan.files:
        target = directory / generated.name
        if not target.is_file() or target.read_text() != generated.content:
            changed.append(generated.name)
            target.write_text(generated.content)
    plan.changed_files = changed
    return changed
