"""`nvidia-smi topo -m`: the GPU/NIC affinity matrix.

        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    PIX     NODE    0-47,96-143     0               N/A
NIC0    PIX     NODE     X      NODE

Each cell says how two devices reach each other: X (itself), PIX (at most one PCIe bridge), PXB
(several bridges, no host bridge), PHB (through a PCIe host bridge, the CPU), NODE (between host
bridges of one NUMA node), SYS (across the inter-socket link), NV# (a bonded set of # NVLinks,
between GPUs). Older drivers also print SOC or PSB. Drivers since about R470 name NICs NIC0, NIC1
... in the matrix and map them under "NIC Legend:" ("  NIC0: mlx5_0"); older ones use the device
name as the column ("mlx5_0"). The separators are tabs as printed and spaces where the output
was pasted somewhere; both are read (cells never hold spaces; the trailing affinity columns do).

Lines that are not part of the matrix or its legends (a shell prompt, a warning) are skipped and
named in `warnings`; output without a matrix header is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError

TOOL_TOPO = "nvidia-smi topo -m"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header row on a terminal
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_DEVICE_LABEL = re.compile(r"^(GPU|NIC)\d+$")
_NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_LEGEND_LINE = re.compile(r"^\s*(\S+)\s*=\s*\S")
_CELL = re.compile(r"^(X|NV\d+|[A-Z][A-Z0-9]{1,5})$")
_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# How close a NIC is to a GPU, nearest first; a code this table does not know ranks last.
PATH_ORDER = ("X", "PIX", "PXB", "PSB", "PHB", "NODE", "SYS", "SOC")


def path_rank(code: str) -> int:
    """0 for X, 1 for PIX ... 7 for SOC; NVLink codes rank 1 (a direct link); unknown codes 8."""
    if code.startswith("NV"):
        return 1
    return PATH_ORDER.index(code) if code in PATH_ORDER else len(PATH_ORDER)


@dataclass(frozen=True, slots=True)
class TopoGpu:
    index: int
    cpu_affinity: str | None
    numa_affinity: str | None
    gpu_numa_id: str | None


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    """The matrix. `links` maps (row label, column label) to a cell code, labels as printed
    ("GPU0", "NIC3" or "mlx5_3"); `nic_names` maps each NIC label to its device name (the NIC
    Legend's, or the label itself where the driver printed device names). `nics` are device
    names in column order."""

    gpus: tuple[TopoGpu, ...]
    nics: tuple[str, ...]
    nic_names: dict[str, str]
    links: dict[tuple[str, str], str]
    has_nic_legend: bool
    warnings: tuple[str, ...]

    def _nic_label(self, nic: str) -> str | None:
        if nic in self.nic_names:
            return nic
        return next((label for label, name in self.nic_names.items() if name == nic), None)

    def gpu_nic(self, gpu: int, nic: str) -> str | None:
        """How GPU `gpu` reaches NIC `nic` (a device name such as "mlx5_3", or a label);
        None when the matrix does not say (NIC absent, or the rows were cut)."""
        label = self._nic_label(nic)
        if label is None:
            return None
        gpu_label = f"GPU{gpu}"
        return self.links.get((gpu_label, label)) or self.links.get((label, gpu_label))

    def nearest_gpus(self, nic: str) -> tuple[str | None, tuple[int, ...]]:
        """The closest path from `nic` to any GPU and the GPUs at that distance."""
        paths = {gpu.index: self.gpu_nic(gpu.index, nic) for gpu in self.gpus}
        known = {index: code for index, code in paths.items() if code is not None}
        if not known:
            return None, ()
        best = min(known.values(), key=path_rank)
        rank = path_rank(best)
        return best, tuple(i for i, code in sorted(known.items()) if path_rank(code) == rank)


def _fields(line: str) -> list[str]:
    return _ANSI.sub("", line).split()


def _header(tokens: list[str]) -> tuple[list[str], list[str]] | None:
    """(device labels, extra column names) of a header row, or None when it is not one."""
    if not tokens or not _GPU_LABEL.match(tokens[0]):
        return None
    text = " ".join(tokens)
    extras = [name for name in _EXTRA_COLUMNS if name in text]
    for name in extras:
        text = text.replace(name, "")
    labels = text.split()
    # A header holds device labels only; a GPU row that lost its header holds cells (X, NV18).
    if any(_CELL.match(label) and not _DEVICE_LABEL.match(label) for label in labels):
        return None
    return labels, extras


def _row(
    tokens: list[str], labels: list[str], extras: list[str]
) -> tuple[list[str], list[str]] | None:
    """(cells, extra values) of a matrix row, or None when the cells cannot be read."""
    cells = tokens[1 : 1 + len(labels)]
    if len(cells) != len(labels) or not all(_CELL.match(cell) for cell in cells):
        return None
    rest = tokens[1 + len(labels) :]
    if len(rest) > len(extras):
        return None
    return cells, rest


def parse_topo(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` (or `-mp`) output."""
    lines = text.splitlines()
    labels: list[str] = []
    extras: list[str] = []
    start = None
    for line_no, line in enumerate(lines, start=1):
        found = _header(_fields(line))
        if found is not None:
            labels, extras = found
            start = line_no
            break
    if start is None:
        first = next((line for line in lines if line.strip()), None)
        raise ParseError(TOOL_TOPO, "no matrix header (a row starting with GPU0)", line=first)
    links: dict[tuple[str, str], str] = {}
    gpus: list[TopoGpu] = []
    legend: dict[str, str] = {}
    warnings = [
        f"{TOOL_TOPO}: skipped line {n}: {line.strip()[:120]!r}"
        for n, line in enumerate(lines[: start - 1], start=1)
        if line.strip()
    ]
    section = "matrix"
    for line_no, line in enumerate(lines[start:], start=start + 1):
        tokens = _fields(line)
        if not tokens:
            continue
        if line.strip() in ("Legend:", "NIC Legend:"):
            section = line.strip()
            continue
        if section == "matrix" and tokens[0] in labels:
            row = _row(tokens, labels, extras)
            if row is None:
                warnings.append(f"{TOOL_TOPO}: unreadable row at line {line_no}: {line.strip()!r}")
                continue
            cells, rest = row
            links.update(
                {(tokens[0], label): cell for label, cell in zip(labels, cells, strict=True)}
            )
            gpu = _GPU_LABEL.match(tokens[0])
            if gpu:
                values = dict(
                    zip(extras, [value if value != "N/A" else None for value in rest], strict=False)
                )
                gpus.append(
                    TopoGpu(
                        index=int(gpu.group(1)),
                        cpu_affinity=values.get("CPU Affinity"),
                        numa_affinity=values.get("NUMA Affinity"),
                        gpu_numa_id=values.get("GPU NUMA ID"),
                    )
                )
            continue
        nic = _NIC_LEGEND_LINE.match(line)
        if section == "NIC Legend:" and nic:
            legend[nic.group(1)] = nic.group(2)
            continue
        if section == "Legend:" and _LEGEND_LINE.match(line):
            continue
        warnings.append(f"{TOOL_TOPO}: skipped line {line_no}: {line.strip()[:120]!r}")
    nic_labels = [label for label in labels if not _GPU_LABEL.match(label)]
    if not links:
        raise ParseError(TOOL_TOPO, "the matrix has no readable row", line_no=start)
    names = {label: legend.get(label, label) for label in nic_labels}
    return TopoMatrix(
        gpus=tuple(gpus),
        nics=tuple(names[label] for label in nic_labels),
        nic_names=names,
        links=links,
        has_nic_legend=bool(legend),
        warnings=tuple(warnings),
    )
