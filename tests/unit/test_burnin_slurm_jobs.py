"""The Slurm side of burn-in as text: suites, job scripts, node classification, busy nodes."""

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


def test_cpu_node_job_is_pinned_to_its_node_and_stamps_the_host():
    """One job per node, pinned (--nodelist, -N1, no array): Slurm cannot run it elsewhere, its
    result is named by the node it is for, and the GEMM document records where it really ran."""
    suite = resolve_suite(BurninSpec(), "quick")
    spec = J.node_job("RUN1", "kiln-burnin-run1", suite, "n01", gpus=0)
    assert (spec.name, spec.nodes, spec.tests, spec.allreduce_jobs) == (
        "node-n01",
        ("n01",),
        "n01",
        (),
    )
    lines = spec.script.splitlines()
    assert lines[:10] == [
        "#!/bin/bash",
        "#SBATCH --job-name=kiln-burnin-node",
        "#SBATCH --reservation=kiln-burnin-run1",
        "#SBATCH --time=10",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
        "#SBATCH --output=/var/lib/kiln/burnin/logs/RUN1-node-n01-%j.log",
        "#SBATCH --nodes=1",
        "#SBATCH --nodelist=n01",
        "#SBATCH --ntasks-per-node=1",
    ]
    assert "--array" not in spec.script and "SLURMD_NODENAME" not in spec.script
    assert "node=n01  # the node this job tests (it is pinned there)" in lines
    assert 'host="$(hostname -s)"  # the node it runs on' in lines
    assert (
        'save "$out/gemm/$node.json" stamp /opt/kiln/burnin/bin/kiln-burnin gemm --seconds 10 '
        "|| rc=$?" in lines
    )
    assert "srun" not in spec.script  # no intra-node all-reduce without GPUs
    assert lines[-1] == "exit $rc"


def test_the_stamp_adds_the_host_and_keeps_a_failure_a_failure(tmp_path):
    """The job's `stamp` run by bash: `host` added to the workload's document (one it wrote
    itself is kept), a failing workload or one that printed no JSON leaves no result."""
    import json
    import subprocess

    script = J.node_job("R", "res", resolve_suite(BurninSpec()), "n01", gpus=0).script
    stamp = script[script.index("stamp() {") : script.index('"$host"; }') + len('"$host"; }')]
    out = tmp_path / "out"
    out.mkdir()
    body = "\n".join([
        "set -uo pipefail", "host=n07", stamp,
        'save() { local dest="$1"; shift; "$@" > "$dest.tmp" && mv "$dest.tmp" "$dest"; }',
        f"save {out}/a.json stamp echo '{{\"kind\": \"gemm\"}}'",
        f"save {out}/b.json stamp echo '{{\"host\": \"n01\"}}'",
        f"save {out}/c.json stamp false",
        f"save {out}/d.json stamp echo 'Traceback (most recent call last):'",
    ])  # fmt: skip
    subprocess.run(["bash", "-c", body], check=False, capture_output=True)
    assert json.loads((out / "a.json").read_text()) == {"kind": "gemm", "host": "n07"}
    assert json.loads((out / "b.json").read_text()) == {"host": "n01"}
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".json") == ["a.json", "b.json"]


def test_gpu_node_job_adds_the_intra_node_allreduce():
    suite = resolve_suite(BurninSpec(), "standard")
    spec = J.node_job("R", "res", suite, "g1", gpus=8)
    assert "#SBATCH --gres=gpu:8" in spec.script
    assert "#SBATCH --nodelist=g1" in spec.script
    assert "gemm --seconds 600" in spec.script
    assert (
        'save "$out/allreduce/node-$node.json" /opt/kiln/burnin/bin/kiln-burnin '
        "allreduce_launch --ntasks-per-node 8 --iters 50 --timeout 1800 --backend nccl"
        in spec.script
    )
    assert spec.allreduce_jobs == ("node-g1",)


def test_fabric_and_pair_jobs_force_the_ring_on_exactly_their_nodes():
    suite = resolve_suite(BurninSpec(), "quick")
    fabric = J.allreduce_job("R", "res", suite, "fabric-ring", ["n01", "n02", "n03"], gpus=0)
    assert "#SBATCH --nodelist=n[01-03]" in fabric.script
    assert "#SBATCH --nodes=3" in fabric.script
    assert (
        "allreduce_launch --ntasks-per-node 1 --iters 20 --timeout 600 --backend gloo --ring"
        in fabric.script
    )
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


# -- busy nodes: the jobs that hold them, outside the reservation ------------------------------

JOBS_ON = """\
4711|RUNNING|alice|(null)|n[02-03]
4712_3|COMPLETING|bob|(null)|n03
4713|RUNNING|root|kiln-burnin-run1|n01
4714|SUSPENDED||maint-2026|gpu[001-002]
"""


def test_jobs_on_asks_squeue_for_the_jobs_that_hold_the_nodes():
    from kiln.slurmctl import commands

    assert commands.jobs_on(["n01", "n02", "n03"]) == [
        "squeue", "--noheader", "--all", "--nodelist=n[01-03]",
        "--states=CONFIGURING,RUNNING,COMPLETING,SUSPENDED,STOPPED", "--format=%i|%T|%u|%v|%N",
    ]  # fmt: skip
    assert commands.reservation_nodes("res", ["n01", "n04"]) == [
        "scontrol", "update", "reservationname=res", "nodes=n[01,04]",
    ]  # fmt: skip


def test_holders_per_node_outside_the_reservation():
    from kiln.slurmctl.queue import holders

    held = holders(JOBS_ON, ["n01", "n02", "n03", "n04"], besides="kiln-burnin-run1")
    assert list(held) == ["n02", "n03"]  # n01: only burn-in's own job; n04: nothing
    assert [j.describe() for j in held["n03"]] == ["job 4711 (alice)", "job 4712_3 (bob)"]
    assert held["n02"][0].reservation is None
    other = holders(JOBS_ON, ["gpu001"])
    assert other["gpu001"][0].describe() == "job 4714"  # no user shown: the id alone
    assert holders("", ["n01"]) == {}


def test_an_unreadable_squeue_line_is_an_error_naming_it():
    from kiln.parsers import ParseError
    from kiln.slurmctl.queue import parse_jobs_on

    with pytest.raises(ParseError, match="line 2"):
        parse_jobs_on("4711|RUNNING|alice|(null)|n01\nsqueue: error: Invalid user\n")


def test_busy_message_and_progress_name_the_jobs():
    from kiln.burnin.nodes import busy_message, describe
    from kiln.slurmctl.queue import holders

    held = holders(JOBS_ON, [f"n{i:02d}" for i in range(1, 4)])
    assert busy_message(held["n02"]) == (
        "not tested (busy): job 4711 (alice) runs on it outside the reservation"
    )
    assert busy_message(held["n03"]).endswith("job 4712_3 (bob) run on it outside the reservation")
    many = {f"n{i:02d}": held["n02"] for i in range(1, 11)}
    assert describe(many).endswith("n08 (job 4711 (alice)) and 2 more")


def test_several_job_scripts_go_in_one_exec_and_each_gets_its_id():
    from pathlib import Path

    from kiln.fleet import CommandOutcome, ExecResult, NodeResult
    from kiln.inventory import require_valid
    from kiln.slurmctl import commands
    from kiln.slurmctl.remote import Controller

    cluster = require_valid(Path(__file__).resolve().parents[2] / "inventories" / "sandbox")
    sent = []

    def runner(nodes, command, **_):
        sent.append(command)
        out = (
            f"{commands.STEP_MARK} 0\n41\n{commands.STEP_MARK}-rc 0\n"
            f"{commands.STEP_MARK} 1\n{commands.STEP_MARK}-rc 1\n"
        )
        node = nodes[0]
        result = NodeResult(node.name, node.address, CommandOutcome.OK, 0, out, "sbatch: error: x")
        return ExecResult(command, [result], 0.1, 1, 60.0)

    ctl = Controller(cluster, runner=runner)
    ids, stderr = ctl.submit_many(["#!/bin/bash\ntrue\n", "#!/bin/bash\nfalse\n"], "node jobs")
    assert ids == ["41", None] and stderr == "sbatch: error: x"
    assert len(sent) == 1 and sent[0].count("sbatch --parsable <<'KILN_BURNIN_JOB'") == 2
