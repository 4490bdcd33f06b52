"""GPU power policy: read the GPUs, plan only the nvidia-smi calls that change something, check.

The role runs `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`, passes the
text here, runs the planned argv lists, queries again and fails the node on any problem
`check_readback` names (each names the GPU by index and PCI bus id).

Locked clocks are not reported by --query-gpu; a lock shows as the current graphics (memory)
clock held inside the locked range, so that is what is planned against and checked. The boot
unit re-applies the lock, and the role re-applies it whenever the policy file changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from kiln.parsers.nvidia_smi_query import QueryGpuRow, parse_query_gpu_csv

NVIDIA_SMI = "nvidia-smi"

# Long names: nvidia-smi prints these in its header whatever alias was asked for.
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "pci.bus_id",
    "persistence_mode",
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "power.draw",
    "clocks.current.graphics",
    "clocks.current.memory",
    "clocks.max.graphics",
    "clocks.max.memory",
    "temperature.gpu",
    "clocks_event_reasons.active",
)

# A limit nvidia-smi reads back within this many watts of the request took effect.
LIMIT_TOLERANCE_W = 0.5


@dataclass(frozen=True, slots=True)
class GpuState:
    index: int
    bus_id: str | None
    persistence: bool | None
    power_limit_w: float | None
    default_limit_w: float | None
    min_limit_w: float | None
    max_limit_w: float | None
    power_draw_w: float | None
    graphics_mhz: float | None
    memory_mhz: float | None
    max_graphics_mhz: float | None
    max_memory_mhz: float | None
    temperature_c: float | None
    event_reasons_mask: str | None

    @property
    def name(self) -> str:
        return f"GPU {self.index}" + (f" ({self.bus_id})" if self.bus_id else "")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ClockRange:
    min_mhz: int
    max_mhz: int

    def holds(self, mhz: float | None) -> bool:
        return mhz is not None and self.min_mhz <= mhz <= self.max_mhz

    @property
    def arg(self) -> str:
        return f"{self.min_mhz},{self.max_mhz}"


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    persistence_mode: bool = True
    power_limit_w: int | None = None  # None: the GPU's own default limit
    gpu_clocks: ClockRange | None = None
    memory_clocks: ClockRange | None = None

    @classmethod
    def from_mapping(cls, data: Mapping | None) -> GpuPolicy:
        """From kiln_power (or the role's resolved inputs); missing keys take the defaults."""
        data = dict(data or {})

        def clocks(value: Mapping | None) -> ClockRange | None:
            if not value:
                return None
            return ClockRange(int(value["min_mhz"]), int(value["max_mhz"]))

        limit = data.get("power_limit_w")
        return cls(
            persistence_mode=bool(data.get("persistence_mode", True)),
            power_limit_w=None if limit in (None, "") else int(limit),
            gpu_clocks=clocks(data.get("gpu_clocks")),
            memory_clocks=clocks(data.get("memory_clocks")),
        )

    def target_limit(self, gpu: GpuState) -> float | None:
        return float(self.power_limit_w) if self.power_limit_w is not None else gpu.default_limit_w


def _state(row: QueryGpuRow) -> GpuState:
    index = row.get_int("index")
    if index is None:
        raise ValueError(f"line {row.line_no}: no GPU index")
    return GpuState(
        index=index,
        bus_id=row.get_text("pci.bus_id"),
        persistence=row.get_flag("persistence_mode"),
        power_limit_w=row.get_float("power.limit"),
        default_limit_w=row.get_float("power.default_limit"),
        min_limit_w=row.get_float("power.min_limit"),
        max_limit_w=row.get_float("power.max_limit"),
        power_draw_w=row.get_float("power.draw"),
        graphics_mhz=row.get_float("clocks.current.graphics"),
        memory_mhz=row.get_float("clocks.current.memory"),
        max_graphics_mhz=row.get_float("clocks.max.graphics"),
        max_memory_mhz=row.get_float("clocks.max.memory"),
        temperature_c=row.get_float("temperature.gpu"),
        event_reasons_mask=row.get_text("clocks_event_reasons.active"),
    )


def read_states(text: str, fields: Sequence[str] | None = QUERY_FIELDS) -> list[GpuState]:
    """Per-GPU state from `--format=csv,noheader,nounits` output of `fields` (in that order);
    `fields=None` reads a header line instead (plain `--format=csv`)."""
    return [_state(row) for row in parse_query_gpu_csv(text, fields)]


def _smi(index: int, *args: str) -> list[str]:
    return [NVIDIA_SMI, "-i", str(index), *args]


def plan_commands(
    states: Sequence[GpuState], policy: GpuPolicy, *, reapply_clocks: bool = False
) -> tuple[list[list[str]], list[str]]:
    """(argv lists to run, refusals). Only settings that differ from the read state are planned;
    `reapply_clocks` re-locks clocks that already sit in range (the policy file changed).
    A limit outside a GPU's own min/max is refused, not sent."""
    commands: list[list[str]] = []
    refused: list[str] = []
    for gpu in states:
        if policy.persistence_mode and gpu.persistence is not True:
            commands.append(_smi(gpu.index, "-pm", "1"))
        elif not policy.persistence_mode and gpu.persistence is True:
            commands.append(_smi(gpu.index, "-pm", "0"))
        target = policy.target_limit(gpu)
        if target is not None:
            low, high = gpu.min_limit_w, gpu.max_limit_w
            if (low is not None and target < low) or (high is not None and target > high):
                refused.append(
                    f"{gpu.name}: power limit {target:g} W is outside the GPU's own range "
                    f"{low:g}-{high:g} W"
                )
            elif gpu.power_limit_w is None or abs(gpu.power_limit_w - target) > LIMIT_TOLERANCE_W:
                commands.append(_smi(gpu.index, "-pl", f"{target:g}"))
        for clocks, current, flag in (
            (policy.gpu_clocks, gpu.graphics_mhz, "-lgc"),
            (policy.memory_clocks, gpu.memory_mhz, "-lmc"),
        ):
            if clocks is not None and (reapply_clocks or not clocks.holds(current)):
                commands.append(_smi(gpu.index, flag, clocks.arg))
    return commands, refused


def check_readback(
    states: Sequence[GpuState], policy: GpuPolicy, expected_gpus: int | None = None
) -> list[str]:
    """Every way the read-back differs from the policy, one line per GPU and setting."""
    problems: list[str] = []
    if expected_gpus is not None and len(states) != expected_gpus:
        seen = ", ".join(str(gpu.index) for gpu in states) or "none"
        problems.append(f"{len(states)} GPU(s) answered (indexes {seen}), {expected_gpus} declared")
    for gpu in states:
        if gpu.persistence is not policy.persistence_mode:
            want = "Enabled" if policy.persistence_mode else "Disabled"
            have = {True: "Enabled", False: "Disabled", None: "unknown"}[gpu.persistence]
            problems.append(f"{gpu.name}: persistence mode {have}, not {want}")
        target = policy.target_limit(gpu)
        if target is not None and (
            gpu.power_limit_w is None or abs(gpu.power_limit_w - target) > LIMIT_TOLERANCE_W
        ):
            have = "unknown" if gpu.power_limit_w is None else f"{gpu.power_limit_w:g} W"
            problems.append(f"{gpu.name}: power limit {have}, not {target:g} W")
        for label, clocks, current in (
            ("graphics clock", policy.gpu_clocks, gpu.graphics_mhz),
            ("memory clock", policy.memory_clocks, gpu.memory_mhz),
        ):
            if clocks is not None and not clocks.holds(current):
                have = "unknown" if current is None else f"{current:g} MHz"
                problems.append(
                    f"{gpu.name}: {label} {have}, outside the locked {clocks.min_mhz}-"
                    f"{clocks.max_mhz} MHz"
                )
    return problems
