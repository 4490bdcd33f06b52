"""kiln.burnin.dcgm: the DCGM phase of a burn-in, its SSH answered by doubles (recorded outputs)."""

from __future__ import annotations

from pathlib import Path

from captures import shared_capture
from kiln.burnin import collect
from kiln.burnin import dcgm as D
from kiln.burnin.campaign import BurninOutcome
from kiln.burnin.suites import resolve_suite
from kiln.fleet import CommandOutcome, NodeResult
from kiln.inventory import require_valid
from kiln.judging.model import BurninReport
from kiln.judging.verdicts import node_verdict
from kiln.records.burnin import RunLayout

ROOT = Path(__file__).resolve().parents[2]
GPU8 = ROOT / "tests" / "fixtures" / "burnin" / "gpu8" / "inventory"
SANDBOX = ROOT / "inventories" / "sandbox"
REAL = ROOT / "tests" / "fixtures" / "real" / "dcgmi-diag"
SKIPPED = (REAL / "rtxpro6000_blackwell_x2_r3_hardware_all_skip_dcgm339.txt").read_text()
HEALTHY = (REAL / "v100_pcie_r3_verbose_pass_eud_skip_dcgm339.txt").read_text()
FAILED = shared_capture("dcgmi-diag/h100x8_r3_fail_cuinit_no_fabricmanager_dcgm338.txt").read_text()


def _outcome(tmp_path, inventory, suite="soak", tested=()):
    cluster = require_valid(inventory)
    nodes = [n.name for n in cluster.compute]
    report = BurninReport(cluster.name)
    report.verdicts = [node_verdict(n, "result", n in tested) for n in nodes]
    outcome = BurninOutcome("RUN", tmp_path / "run", resolve_suite(cluster.burnin, suite), nodes,
                            report)  # fmt: skip
    return cluster, outcome, RunLayout(outcome.run_dir)


class Node:
    """What each node answers: the probe, then its dcgmi output (None: no dcgmi)."""

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers = answers
        self.probed: list[str] = []
        self.ran: list[tuple[str, str, float]] = []

    def probe(self, nodes, command):
        assert command == D.PROBE
        self.probed += [n.name for n in nodes]
        return [
            NodeResult(n.name, n.address, CommandOutcome.OK, 0,
                       f"kiln-dcgm {'absent' if self.answers[n.name] is None else 'present'}\n"
                       f"kiln-dcgm host {n.name}.example\n")
            for n in nodes
        ]  # fmt: skip

    def run(self, nodes, command, timeout):
        self.ran += [(n.name, command, timeout) for n in nodes]
        return [
            NodeResult(n.name, n.address, CommandOutcome.OK, 0,
                       f"kiln-dcgm host {n.name}.example\n{self.answers[n.name]}kiln-dcgm rc 0\n")
            for n in nodes
        ]  # fmt: skip


def test_a_run_without_gpu_nodes_skips_the_phase_and_says_so(tmp_path, monkeypatch):
    cluster, outcome, layout = _outcome(tmp_path, SANDBOX, tested=("kiln-node01", "kiln-node02"))

    def no_ssh(nodes, command):
        raise AssertionError("the sandbox has no GPU: nothing may be sent")

    monkeypatch.setattr(collect, "run_as_root", no_ssh)
    lines: list[str] = []
    assert D.dcgm_phase(cluster.compute, outcome, layout, lines.append) == []
    assert lines == ["DCGM: no GPU node in this run; the dcgmi diag step is skipped"]
    assert not any(v.check == "dcgm" for v in outcome.report.verdicts)


def test_the_phase_runs_the_suites_level_on_tested_gpu_nodes_and_judges_them(tmp_path):
    tested = ("gpu001", "gpu002", "gpu003", "gpu004")
    cluster, outcome, layout = _outcome(tmp_path, GPU8, tested=tested)
    ssh = Node({"gpu001": HEALTHY, "gpu002": SKIPPED, "gpu003": FAILED, "gpu004": None})
    lines: list[str] = []
    runs = D.dcgm_phase(cluster.compute, outcome, layout, lines.append, probe=ssh.probe,
                        run=ssh.run)  # fmt: skip

    assert ssh.probed == list(tested)  # gpu005-008 gave no burn-in result: not touched
    assert [(n, t) for n, _, t in ssh.ran] == [(n, 5400 + 180) for n in tested[:3]]
    assert "timeout -k 60 5400 dcgmi diag -r 3 -j" in ssh.ran[0][1]
    assert [r.status for r in runs] == ["ran", "ran", "ran", "absent"]
    assert runs[0].host == "gpu001.example" and runs[0].exit_code == 0
    assert "DCGM: gpu005 not run (it has no burn-in result)" in lines
    assert lines[-1] == "DCGM: 3 node(s) ran dcgmi diag, 1 without dcgmi, 0 gave no answer"
    assert "DCGM: gpu004 has no dcgmi; it cannot be validated" in lines

    dcgm = {v.name: v for v in outcome.report.verdicts if v.check == "dcgm" and v.subject == "node"}
    assert dcgm["gpu001"].passed and not dcgm["gpu004"].passed  # not run is never passed
    assert dcgm["gpu004"].message == (
        "not validated: dcgm r3 could not run: dcgmi is not installed on this GPU node "
        "(the nvidia_dcgm role)"
    )
    assert not dcgm["gpu002"].passed and dcgm["gpu002"].message.startswith("not validated: ")
    assert outcome.report.drain() == {
        "gpu003": dcgm["gpu003"].reason,
    }
    assert dcgm["gpu003"].reason.startswith("kiln: dcgm r3 GPU Memory failed on all GPUs")
    # not validated: the run did not test it (incomplete; a node kiln drained keeps its drain)
    assert outcome.report.not_tested == {
        "gpu002": dcgm["gpu002"].message, "gpu004": dcgm["gpu004"].message,
    }  # fmt: skip
    assert not outcome.report.passed

    # recorded, and judged the same again from the record alone (idempotent)
    assert sorted(p.name for p in (layout.root / "dcgm").iterdir()) == [f"{n}.json" for n in tested]
    again = BurninReport(cluster.name)
    D.add_recorded_verdicts(again, outcome.run_dir)
    D.add_recorded_verdicts(again, outcome.run_dir)
    assert [v.to_dict() for v in again.verdicts] == [
        v.to_dict() for v in outcome.report.verdicts if v.check == "dcgm"
    ]
    assert again.not_tested == outcome.report.not_tested


def test_the_quick_suite_runs_level_1(tmp_path):
    cluster, outcome, layout = _outcome(tmp_path, GPU8, suite="quick", tested=("gpu001",))
    ssh = Node({"gpu001": SKIPPED})
    D.dcgm_phase(cluster.compute, outcome, layout, lambda _: None, probe=ssh.probe, run=ssh.run)
    assert "dcgmi diag -r 1 -j" in ssh.ran[0][1] and ssh.ran[0][2] == 600 + 180
    [verdict] = [v for v in outcome.report.verdicts if v.check == "dcgm"]
    assert verdict.passed  # level 1 requires the deployment tests only


def test_nodes_that_do_not_answer_are_not_validated(tmp_path):
    cluster, outcome, layout = _outcome(tmp_path, GPU8, tested=("gpu001", "gpu002", "gpu003"))

    def probe(nodes, command):
        unreachable = NodeResult("gpu001", "10.0.1.1", CommandOutcome.UNREACHABLE, error="no route")
        odd = NodeResult("gpu002", "10.0.1.2", CommandOutcome.OK, 0, '{"gemm/gpu002.json": "..."}')
        fine = NodeResult("gpu003", "10.0.1.3", CommandOutcome.OK, 0, "kiln-dcgm present\n")
        return [unreachable, odd, fine]

    def run(nodes, command, timeout):  # dcgmi killed by the SSH timeout: no rc line
        return [NodeResult("gpu003", "10.0.1.3", CommandOutcome.TIMEOUT, None,
                           "kiln-dcgm host g3\n", error="timed out")]  # fmt: skip

    runs = D.dcgm_phase(cluster.compute, outcome, layout, lambda _: None, probe=probe, run=run)
    assert [(r.node, r.status) for r in runs] == [
        ("gpu001", "no-answer"), ("gpu002", "no-answer"), ("gpu003", "no-answer"),
    ]  # fmt: skip
    assert runs[0].error == "unreachable: no route"
    assert runs[1].error.startswith("unexpected answer to the dcgmi probe")
    messages = [v.message for v in outcome.report.verdicts if v.check == "dcgm"]
    assert all(m.startswith("not validated: dcgm r3 did not run: ") for m in messages)
    assert sorted(outcome.report.not_tested) == ["gpu001", "gpu002", "gpu003"]


def test_the_diag_command_marks_its_exit_status():
    command = D.diag_command(2)
    assert command.startswith('echo "kiln-dcgm host $(hostname)"; ')
    assert command.endswith('timeout -k 60 1800 dcgmi diag -r 2 -j; echo "kiln-dcgm rc $?"')


def test_judging_a_stored_run_again_reads_its_dcgm_records(tmp_path):
    """`kiln report RUN --inventory` judges the record again: the DCGM runs are in it."""
    import shutil

    from kiln.burnin import judge_run
    from kiln.judging.rules_dcgm import DcgmRun

    run = tmp_path / "run"
    shutil.copytree(GPU8.parent / "run", run)
    D.save_run(RunLayout(run), DcgmRun("gpu002", 3, "ran", output=SKIPPED, exit_code=0))
    report = judge_run(run, require_valid(GPU8))
    [verdict] = [v for v in report.verdicts if v.check == "dcgm"]
    assert verdict.name == "gpu002" and verdict.message.startswith("not validated: dcgm r3")
    assert report.not_tested["gpu002"] == verdict.message and not report.passed
