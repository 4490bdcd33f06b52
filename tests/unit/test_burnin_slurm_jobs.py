"""The Slurm side of burn-in as text: suites, job scripts, node classification."""

from __future__ import annotations

import pytest

from kiln.burnin import jobs as J
from kiln.burnin.nodes import classify
from kiln.burnin.suites import resolve_suite
from kiln.errors import InvalidInputError
from kiln.inventory.schema import BurninSpec
from kiln.parsers.slurm import parse_scontrol_nodes
from kiln.slurmctl.state import from_scontrol


def test_quick_suite_defaults_and_inventory_time_limit():
    quick = resolve_suite(BurninSpec())
    assert (quick.name, quick.gemm_seconds_cpu, quick.gemm_seconds_gpu) == ("quick", 10.0, 60.0)
    assert quick.time_limit_minutes == 10
    limited = resolve_suite(BurninSpec(time_limit_minutes=7), "standard")
    assert limited.time_limit_minutes == 11  # covers the 600 s GEMM + 1 minute


def test_soak_takes_hours_and_its_limit_covers_them():
    soak = resolve_suite(BurninSpec(soak_hours=2), "soak")
    assert soak.gemm_seconds_gpu == 7200 and soak.time_limit_minutes == 140
    assert resolve_suite(BurninSpec(), "soak", hours=0.5).gemm_seconds_cpu == 1800
    with pytest.raises(InvalidInputError, match="soak suite only"):
        resolve_suite(BurninSpec(), "quick", hours=1)
    with pytest.raises(InvalidInputError, match="unknown suite"):
        resolve_suite(BurninSpec(), "long")


def test_seconds_override_shortens_the_gemm_and_the_limit():
    suite = resolve_suite(BurninSpec(), "quick", gemm_seconds=5)
    assert suite.gemm_seconds_cpu == 5 and suite.time_limit_minutes == 6


def test_cpu_node_array_script():
    suite = resolve_suite(BurninSpec(), "quick")
    spec = J.node_array("RUN1", "kiln-burnin-run1", suite, ["n01", "n02"], gpus=0)
    assert spec.name == "node-g0" and spec.allreduce_jobs == ()
    lines = spec.script.splitlines()
    assert lines[:10] == [
        "#!/bin/bash",
        "#SBATCH --job-name=kiln-burnin-node",
        "#SBATCH --reservation=kiln-burnin-run1",
        "#SBATCH --time=10",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
        "#SBATCH --output=/var/lib/kiln/burnin/logs/RUN1-node-%A_%a.log",
        "#SBATCH --array=0-1",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
    ]
    assert (
        'save "$out/gemm/$node.json" /opt/kiln/burnin/bin/kiln-burnin gemm --seconds 10 || rc=$?'
        in lines
    )
    assert "srun" not in spec.script  # no intra-node all-reduce without GPUs
    assert lines[-1] == "exit $rc"


def test_gpu_node_array_adds_the_intra_node_allreduce_and_excludes_other_groups():
    suite = resolve_suite(BurninSpec(), "standard")
    spec = J.node_array("R", "res", suite, ["g1", "g2"], gpus=8, exclude=["c1"])
    assert "#SBATCH --gres=gpu:8" in spec.script
    assert "#SBATCH --exclude=c1" in spec.script
    assert "gemm --seconds 600" in spec.script
    assert (
        'save "$out/allreduce/node-$node.json" srun --kill-on-bad-exit=1 --ntasks-per-node=8 '
        "/opt/kiln/burnin/bin/kiln-burnin allreduce --iters 50 --timeout 1800 --backend nccl"
        in spec.script
    )
    assert spec.allreduce_jobs == ("node-g1", "node-g2")


def test_fabric_and_pair_jobs_force_the_ring_on_exactly_their_nodes():
    suite = resolve_suite(BurninSpec(), "quick")
    fabric = J.allreduce_job("R", "res", suite, "fabric-ring", ["n01", "n02", "n03"], gpus=0)
    assert "#SBATCH --nodelist=n[01-03]" in fabric.script
    assert "#SBATCH --nodes=3" in fabric.script
    assert "allreduce --iters 20 --timeout 600 --backend gloo --ring" in fabric.script
    assert '"$out/allreduce/fabric-ring.json"' in fabric.script
    pair = J.allreduce_job("R", "res", suite, J.pair_name(2, "a", "b"), ["a", "b"], gpus=8)
    assert pair.allreduce_jobs == ("pair-r2-a--b",)
    assert "--backend nccl --ring" in pair.script and "#SBATCH --job-name=kiln-burnin-pair" in (
        pair.script
    )


def test_reservation_name():
    assert J.reservation_name("20260530T101500Z-3f9a1c") == "kiln-burnin-20260530t101500z-3f9a1c"


SCONTROL = """\
NodeName=n01 Arch=x86_64 CoresPerSocket=1
   State=IDLE ThreadsPerCore=1
NodeName=n02 Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN ThreadsPerCore=1
   Reason=kiln: gemm cpu0 0.0004 TFLOPS < floor 0.001 [root@2026-11-30T03:25:42]
NodeName=n03 Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN ThreadsPerCore=1
   Reason=bad DIMM, ticket 4711 [alice@2026-11-29T10:00:00]
NodeName=n04 Arch=x86_64 CoresPerSocket=1
   State=DOWN* ThreadsPerCore=1
"""


def test_classify_tests_kiln_drained_nodes_and_skips_others():
    states = {node.name: from_scontrol(node) for node in parse_scontrol_nodes(SCONTROL)}
    usable, kiln_drained, skipped = classify(states, ["n01", "n02", "n03", "n04", "n05"])
    assert usable == ["n01", "n02"]
    assert kiln_drained == {"n02": "kiln: gemm cpu0 0.0004 TFLOPS < floor 0.001"}
    assert skipped == {
        "n03": "drained by someone else (bad DIMM, ticket 4711)",
        "n04": "Slurm state DOWN",
        "n05": "not known to Slurm",
    }
