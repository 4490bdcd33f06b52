"""`kiln power show`: each node's GPUs as nvidia-smi reports them now, over SSH."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kiln.fleet import NodeResult, Status, run_command
from kiln.inventory import Node
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


def _node_power(node: Node, result: NodeResult) -> NodePower:
    entry = NodePower(node.name, str(result.status), declared_gpus=node.gpu_count)
    if result.status is not Status.OK:
        entry.error = result.error or (result.stderr.strip() or result.stdout.strip())[-300:]
        return entry
    try:
        entry.gpus = read_states(result.stdout)
    except (ParseError, ValueError) as error:
        entry.status, entry.error = "unparsable", str(error)
    return entry


def power_show(
    nodes: Sequence[Node], *, fanout: int = 64, timeout: float = 30.0,
    on_result: Callable[[NodeResult], None] | None = None,
    runner: Callable[..., object] = run_command,
) -> PowerShow:  # fmt: skip
    """Query every GPU node once; CPU-only nodes are listed without being contacted."""
    gpu_nodes = [node for node in nodes if node.has_gpus]
    by_name: dict[str, NodePower] = {}
    if gpu_nodes:
        executed = runner(gpu_nodes, QUERY_COMMAND, fanout=fanout, timeout=timeout,
                          on_result=on_result)  # fmt: skip
        for node, result in zip(gpu_nodes, executed.results, strict=True):
            by_name[node.name] = _node_power(node, result)
    return PowerShow([
        by_name.get(node.name) or NodePower(node.name, "cpu-only", declared_gpus=0)
        for node in nodes
    ])  # fmt: skip
