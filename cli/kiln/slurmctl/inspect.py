"""One node's declared hardware beside what it shows now, with the differences marked.

The node runs a fixed, read-only probe (PROBE: no inventory or user text in it): `nvidia-smi -q
-x` when nvidia-smi exists, an NVIDIA PCI device count from /sys (display and 3D controllers of
vendor 0x10de) either way, the HCAs in /sys/class/infiniband and the loaded driver's version.
The controller answers `scontrol show node`. A node without GPU tools is reported as such, never
as a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kiln.errors import OperationFailed
from kiln.fleet import run_command
from kiln.inventory import Cluster, Node
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi import NvidiaSmiLog, parse_xml
from kiln.records.burnin_verdicts import UNKNOWN, Verdict, last_verdicts
from kiln.slurmctl.remote import Controller, Runner
from kiln.slurmctl.state import NodeState

MARK = "@@kiln-probe"
ABSENT = f"{MARK}-absent"
PROBE = "\n".join(
    [
        f"echo '{MARK} nvidia-smi'",
        "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -q -x 2>&1; "
        f"else echo '{ABSENT}'; fi",
        f"echo '{MARK} pci'",
        "for d in /sys/bus/pci/devices/*; do "
        '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue; '
        'case "$(cat "$d/class" 2>/dev/null)" in 0x0300*|0x0302*) echo "${d##*/}";; esac; done',
        f"echo '{MARK} ib'",
        "ls -1 /sys/class/infiniband 2>/dev/null",
        f"echo '{MARK} driver'",
        "cat /sys/module/nvidia/version 2>/dev/null",
        "true",
    ]
)
_SECTION = re.compile(rf"^{re.escape(MARK)} (\S+)$")


@dataclass(slots=True)
class Shown:
    """What the node showed."""

    smi: NvidiaSmiLog | None = None
    smi_error: str | None = None  # nvidia-smi exists but did not answer with XML
    smi_present: bool = False
    pci_gpus: list[str] = field(default_factory=list)
    hcas: list[str] = field(default_factory=list)
    driver: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.smi.gpus) if self.smi else len(self.pci_gpus)


def parse_probe(text: str) -> Shown:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = _SECTION.match(line.strip())
        if match:
            current = match[1]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    shown = Shown()
    smi = "\n".join(sections.get("nvidia-smi", [])).strip()
    shown.smi_present = bool(smi) and smi != ABSENT
    if shown.smi_present:
        try:
            shown.smi = parse_xml(smi)
        except ParseError:
            shown.smi_error = smi.splitlines()[0][:200]
    shown.pci_gpus = [line.strip() for line in sections.get("pci", []) if line.strip()]
    shown.hcas = sorted(line.strip() for line in sections.get("ib", []) if line.strip())
    driver = "\n".join(sections.get("driver", [])).strip()
    shown.driver = driver or (shown.smi.driver_version if shown.smi else None)
    return shown


@dataclass(frozen=True, slots=True)
class Row:
    item: str
    declared: str
    shown: str
    match: bool | None  # None: nothing to compare (informational)

    def to_dict(self) -> dict:
        return {"item": self.item, "declared": self.declared, "shown": self.shown,
                "match": self.match}  # fmt: skip


@dataclass(slots=True)
class Inspection:
    node: str
    address: str
    reachable: bool
    error: str | None
    rows: list[Row]
    slurm: NodeState | None
    burnin: Verdict
    shown: Shown | None = None

    @property
    def differences(self) -> list[Row]:
        return [row for row in self.rows if row.match is False]

    @property
    def ok(self) -> bool:
        return self.reachable and not self.differences

    def to_dict(self) -> dict:
        shown = self.shown
        return {
            "node": self.node,
            "address": self.address,
            "reachable": self.reachable,
            "error": self.error,
            "ok": self.ok,
            "differences": [row.item for row in self.differences],
            "rows": [row.to_dict() for row in self.rows],
            "gpu_tools": bool(shown and shown.smi_present),
            "gpus": [
                {
                    "index": g.index,
                    "name": g.product_name,
                    "pci_bus_id": g.pci_bus_id,
                    "power_limit_w": g.power.current_limit_w,
                }
                for g in (shown.smi.gpus if shown and shown.smi else ())
            ],  # fmt: skip
            "pci_gpus": shown.pci_gpus if shown else [],
            "hcas": shown.hcas if shown else [],
            "driver": shown.driver if shown else None,
            "slurm": self.slurm.to_dict() if self.slurm else None,
            "burnin": self.burnin.to_dict(),
        }


def _declared_gpus(node: Node) -> str:
    if not node.has_gpus:
        return "none"
    return f"{node.gpu_count} x {node.profile.name}"


def _gpu_rows(node: Node, cluster: Cluster, shown: Shown) -> list[Row]:
    rows = []
    if shown.smi is not None:
        names = sorted({g.product_name or "?" for g in shown.smi.gpus})
        text = f"{len(shown.smi.gpus)} x {', '.join(names)}" if shown.smi.gpus else "0"
        text += " (nvidia-smi)"
    elif shown.smi_error:
        text = f"{len(shown.pci_gpus)} on the PCI bus; nvidia-smi failed: {shown.smi_error}"
    elif not shown.pci_gpus:
        text = "none: no GPU tools (nvidia-smi) present and no NVIDIA GPU on the PCI bus"
    else:
        text = f"{len(shown.pci_gpus)} on the PCI bus; no GPU tools (nvidia-smi) present"
    declared = node.gpu_count if node.has_gpus else 0
    rows.append(Row("GPUs", _declared_gpus(node), text, shown.gpu_count == declared))
    if node.has_gpus or shown.driver:
        branch = cluster.versions.driver_branch
        major = (shown.driver or "").split(".")[0]
        match = major == str(branch) if node.has_gpus else None
        rows.append(Row("driver", f"branch {branch}", shown.driver or "not loaded", match))
    if shown.smi is not None and shown.smi.gpus:
        default = node.profile.power_limit_default_w if node.has_gpus else None
        limit = node.power.power_limit_w or default
        limits = sorted({g.power.current_limit_w for g in shown.smi.gpus}, key=lambda w: w or 0)
        text = ", ".join(f"{w:g} W" if w is not None else "n/a" for w in limits)
        match = None if limit is None else limits == [float(limit)]
        rows.append(Row("power limit", f"{limit} W" if limit else "-", text, match))
    return rows


def _slurm_rows(node: Node, slurm: NodeState | None, error: str | None = None) -> list[Row]:
    if error is not None:
        return [Row("slurm", "a Slurm node" if node.is_compute else "-",
                    f"cannot read Slurm: {error}", False)]  # fmt: skip
    if slurm is None:
        expected = "a Slurm node" if node.is_compute else "not a Slurm node (controller)"
        return [Row("slurm", expected, "unknown to Slurm", False if node.is_compute else None)]
    reason = slurm.describe_drain() if slurm.drained else (slurm.reason or "-")
    rows = [Row("slurm state", "-", slurm.state, None), Row("slurm reason", "-", reason, None)]
    declared = node.gpu_count if node.has_gpus else 0
    rows.append(Row("slurm GPUs (Gres)", str(declared), str(slurm.gpus), slurm.gpus == declared))
    return rows


def inspect_node(
    cluster: Cluster,
    node: Node,
    *,
    runner: Runner = run_command,
    timeout: float = 60.0,
    state: Path | None = None,
) -> Inspection:
    """Probe `node`, ask the controller about it and compare both with the inventory."""
    answer = runner([node], PROBE, fanout=1, timeout=timeout).results[0]
    ctl = Controller(cluster, runner=runner, timeout=timeout)
    slurm_error = None
    try:
        slurm = ctl.show([node.name]).get(node.name)
    except (OperationFailed, ParseError) as error:  # Slurm's words, never "not in Slurm"
        slurm, slurm_error = None, str(error)
    burnin = last_verdicts(cluster.name, [node.name], state).get(node.name, UNKNOWN)
    if answer.exit_code != 0:
        error = answer.error or answer.stderr.strip() or f"probe exited {answer.exit_code}"
        rows = _slurm_rows(node, slurm, slurm_error)
        return Inspection(node.name, node.address, False, f"{answer.status}: {error}", rows,
                          slurm, burnin)  # fmt: skip
    shown = parse_probe(answer.stdout)
    rows = _gpu_rows(node, cluster, shown)
    declared_hcas = list(node.ib_hcas)
    rows.append(
        Row("IB HCAs", ", ".join(declared_hcas) or "none", ", ".join(shown.hcas) or "none",
            sorted(declared_hcas) == shown.hcas)
    )  # fmt: skip
    rows += _slurm_rows(node, slurm, slurm_error)
    rows.append(Row("last burn-in", "-", burnin.text(), None))
    return Inspection(node.name, node.address, True, None, rows, slurm, burnin, shown)
