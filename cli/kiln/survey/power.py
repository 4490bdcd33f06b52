"""`kiln power show`'s reading of the fleet: one nvidia-smi query per GPU node, over SSH.

kiln.power.show holds the query and reads the answers; this module only sends it (kiln.fleet).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.fleet import CommandOutcome, NodeResult, run_command
from kiln.inventory import Node
from kiln.power.show import QUERY_COMMAND, NodePower, PowerShow, read_answer


def _node_power(node: Node, result: NodeResult) -> NodePower:
    if result.status is CommandOutcome.OK:
        return read_answer(node.name, node.gpu_count, result.stdout)
    error = result.error or (result.stderr.strip() or result.stdout.strip())[-300:]
    return NodePower(node.name, str(result.status), declared_gpus=node.gpu_count, error=error)


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
