"""kiln power show: one nvidia-smi query per GPU node, CPU-only nodes listed and not contacted."""

from __future__ import annotations

from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.inventory import Node
from kiln.power.show import QUERY_COMMAND
from kiln.survey.power import power_show


def _node(name: str, model: str, count: int) -> Node:
    return Node(
        name=name, address=f"10.0.0.{len(name)}", groups=("kiln_compute",), is_controller=False,
        is_compute=True, rack="r01", leaf_switch="leaf-r01", gpu_model=model, gpu_count=count,
        sockets=2, cores_per_socket=56, threads_per_core=2, real_memory_mb=1_900_000,
    )  # fmt: skip


ROW = ("{i}, 00000000:1{i}:00.0, Enabled, 500.00, 700.00, 200.00, 700.00, 88.10, 1980, 2619, "
       "1980, 2619, 37, 0x0000000000000000")  # fmt: skip


def test_queries_gpu_nodes_only_and_parses_each_gpu():
    calls = []

    def runner(nodes, command, **kwargs):
        calls.append(([n.name for n in nodes], command))
        results = [
            NodeResult("gpu01", "10.0.0.5", CommandOutcome.OK, 0,
                       "\n".join(ROW.format(i=i) for i in range(2)) + "\n"),
            NodeResult("gpu02", "10.0.0.5", CommandOutcome.UNREACHABLE,
                       error="no SSH answer within 10s"),
        ]  # fmt: skip
        return ExecResult(command, results, 0.1, 64, 30.0)

    nodes = [
        _node("gpu01", "h100-sxm", 2),
        _node("cpu01", "none", 0),
        _node("gpu02", "h100-sxm", 8),
    ]
    result = power_show(nodes, runner=runner)
    assert calls == [(["gpu01", "gpu02"], QUERY_COMMAND)]
    assert QUERY_COMMAND.startswith("nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,")
    assert QUERY_COMMAND.endswith(" --format=csv,noheader,nounits")
    gpu01, cpu01, gpu02 = result.nodes
    assert [(g.index, g.power_limit_w, g.graphics_mhz, g.temperature_c) for g in gpu01.gpus] == [
        (0, 500.0, 1980.0, 37.0), (1, 500.0, 1980.0, 37.0)]  # fmt: skip
    assert (cpu01.status, cpu01.gpus) == ("cpu-only", [])
    assert (gpu02.status, gpu02.error) == ("unreachable", "no SSH answer within 10s")
    assert result.ok is False
    document = result.to_dict()
    assert document["nodes"][1] == {"name": "cpu01", "status": "cpu-only", "declared_gpus": 0,
                                    "error": None, "gpus": []}  # fmt: skip


def test_unreadable_answer_is_reported_not_raised():
    def runner(nodes, command, **kwargs):
        return ExecResult(
            command, [NodeResult("gpu01", "a", CommandOutcome.OK, 0, "garbage\n")], 0, 1, 1
        )

    (node,) = power_show([_node("gpu01", "h100-sxm", 8)], runner=runner).nodes
    assert node.status == "unparsable" and node.error
