"""What `kiln power show` reports: each node's GPUs as nvidia-smi reports them now.

Pure: the query to send and the reading of each node's answer. kiln.survey.power sends the
query over SSH and hands the answers here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.power.gpu import NVIDIA_SMI, QUERY_FIELDS, GpuState, read_states

QUERY_COMMAND = f"{NVIDIA_SMI} --query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"


@dataclass
class NodePower:
    name: str
    status: str  # ok, cpu-only, failed, unreachable, timeout, hostkey, unparsable
    gpus: list[GpuState] = field(default_factory=list)
    declared_gpus: int = 0
    error: str | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "declared_gpus": self.declared_gpus,
            "error": self.error,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }


@dataclass
class PowerShow:
    nodes: list[NodePower]

    @property
    def ok(self) -> bool:
        return all(node.status in ("ok", "cpu-only") for node in self.nodes)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "command": QUERY_COMMAND,
                "nodes": [node.to_dict() for node in self.nodes]}  # fmt: skip


def read_answer(name: str, declared_gpus: int, stdout: str) -> NodePower:
    """A node that answered QUERY_COMMAND: its GPUs, or "unparsable" with the reason."""
    entry = NodePower(name, "ok", declared_gpus=declared_gpus)
    try:
        entry.gpus = read_states(stdout)
    except (ParseError, ValueError) as error:
        entry.status, entry.error = "unparsable", str(error)
    return entry
