"""Load an Ansible inventory directory into a validated Cluster model.

result = load_cluster(path)      # every finding, and the Cluster when there are no errors
cluster = require_valid(path)    # the Cluster, or InvalidInputError (exit 2)

The steps, each its own module: sources (read the files as Ansible does) -> resolve (Ansible's
variable precedence) -> values (type each written kiln_* value once) -> rules (every check, one
small function each) -> build (the Cluster, only when no rule found an error).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import InvalidInputError
from kiln.inventory.build import build_cluster
from kiln.inventory.context import RecordedSlurm, read_context
from kiln.inventory.findings import Finding, FindingCollector, Level, Origin
from kiln.inventory.model import Cluster, Node, Partition
from kiln.inventory.rules import check_inventory
from kiln.inventory.vault import VaultConfig, active

__all__ = [
    "Cluster",
    "Finding",
    "Level",
    "LoadResult",
    "Node",
    "Origin",
    "Partition",
    "RecordedSlurm",
    "VaultConfig",
    "load_cluster",
    "require_valid",
]


@dataclass
class LoadResult:
    path: Path
    cluster: Cluster | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.WARNING]

    @property
    def ok(self) -> bool:
        return self.cluster is not None and not self.errors


def load_cluster(
    path: Path | str, vault: VaultConfig | None = None, recorded: RecordedSlurm | None = None
) -> LoadResult:
    """Every finding, and the Cluster when there are none; `vault` decrypts vaulted content;
    `recorded`, what the last preflight read of the Slurm installed, is judged too."""
    path = Path(path).expanduser().absolute()
    vault = vault if vault is not None else active()
    collector = FindingCollector()
    cluster = None
    # Loading allocates millions of small, long-lived objects and no cycles; the cyclic
    # collector would rescan them again and again (superlinear at 12,500 hosts). Afterwards they
    # are frozen, not handed back to it: re-enabled, it would walk them all through every
    # generation as soon as the caller allocates (0.25 s of `kiln plan`'s rendering). Frozen
    # objects still go when unreferenced; only a cycle alive at that moment waits for the exit.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        context = read_context(path, collector, vault, recorded)
        if context is not None:
            check_inventory(context, collector)
            if not collector.has_errors:
                cluster = build_cluster(context)
    finally:
        gc.freeze()
        if gc_was_enabled:
            gc.enable()
    return LoadResult(path=path, cluster=cluster, findings=collector.findings)


def format_finding(finding: Finding, root: Path | None = None) -> str:
    where = finding.origin.display(root) if finding.origin else "-"
    key = f" [{finding.key}]" if finding.key else ""
    hosts = ""
    if len(finding.hosts) > 1:
        hosts = f" ({len(finding.hosts)} hosts)"
    text = f"{where}: {finding.level}{key}: {finding.message}{hosts}"
    if finding.hint:
        text += f"\n    fix: {finding.hint}"
    return text


def require_valid(path: Path | str, vault: VaultConfig | None = None) -> Cluster:
    """The validated Cluster, or InvalidInputError listing every error (nothing touched)."""
    result = load_cluster(path, vault)
    if result.ok:
        return result.cluster  # type: ignore[return-value]
    lines = [format_finding(f, result.path) for f in result.errors]
    raise InvalidInputError(
        f"inventory {result.path} is invalid ({len(result.errors)} errors); nothing was "
        "touched:\n" + "\n".join(lines),
        hint=f"run `kiln validate {path}` for every finding",
    )
