"""The campaign's cleanup: an interrupt cancels, restores kiln's drains, deletes the reservation."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kiln.burnin import campaign as C
from kiln.burnin import collect
from kiln.burnin.suites import resolve_suite
from kiln.inventory import require_valid
from kiln.judging.model import BurninReport
from kiln.slurmctl import commands
from kiln.slurmctl.remote import Step

SANDBOX = Path(__file__).resolve().parents[2] / "inventories" / "sandbox"


class FakeController:
    """kiln.slurmctl's Controller, answered: each command recorded as its shell line."""

    def __init__(self, fail_on: str) -> None:
        self.commands: list[str] = []
        self.fail_on = fail_on

    def run(self, steps, *, check: bool = True) -> list[Step]:
        answers = []
        for argv in steps:
            self.commands.append(shlex.join(argv))
            if argv[0] == self.fail_on:
                raise KeyboardInterrupt
            answers.append(Step(tuple(argv), 0, ""))
        return answers

    def submit(self, script: str, what: str) -> str:
        self.commands.append(commands.sbatch(script).splitlines()[0])
        if self.fail_on == "sbatch":
            raise KeyboardInterrupt
        return "17"


@pytest.mark.parametrize("fail_on", ["sbatch", "squeue"])
def test_interrupt_restores_drains_and_deletes_the_reservation(tmp_path, fail_on):
    cluster = require_valid(SANDBOX)
    nodes = [n.name for n in cluster.compute]
    outcome = C.BurninOutcome(
        "RUN", tmp_path, resolve_suite(cluster.burnin), nodes, BurninReport(cluster.name)
    )
    ctl = FakeController(fail_on)
    drained = {nodes[0]: "kiln: quarantined until burn-in passes"}
    campaign = C._Campaign(cluster, C.BurninOptions(), ctl, outcome, lambda _: None, drained)
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    res = "kiln-burnin-run"
    assert ctl.commands[0].startswith(f"scontrol create reservation reservationname={res} ")
    assert ctl.commands[1] == f"scontrol update nodename={nodes[0]} state=resume"
    tail = ctl.commands[-2:]
    assert tail == [
        f"scontrol update nodename={nodes[0]} state=drain "
        "'reason=kiln: quarantined until burn-in passes'",
        f"scontrol delete reservationname={res}",
    ]
    if fail_on == "squeue":  # submitted jobs are cancelled first
        assert any(c.startswith("scancel 17") for c in ctl.commands)


class RecordingController:
    """Slurm on the controller, answered: job ids for sbatch, an empty queue for squeue."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, steps, *, check: bool = True) -> list[Step]:
        self.commands += [shlex.join(argv) for argv in steps]
        return [Step(tuple(argv), 0, "") for argv in steps]

    def submit(self, script: str, what: str) -> str:
        self.commands.append(commands.sbatch(script))
        return str(len(self.commands))


def test_infiniband_nodes_are_read_before_and_after_and_their_rails_run_in_rounds(
    tmp_path, monkeypatch
):
    """The whole campaign on four HCA nodes, SSH and Slurm answered by doubles: the HCAs are
    read before the jobs (names for ib_write_bw) and after (counters), three ib rounds are
    submitted, the clients' reports come back with the results, and the slow HCA is drained."""
    import json

    from ib_doubles import GEMM, HDR_195, HEALTHY, NODES, ROCE_98, dump, inventory
    from kiln.fabric.links import sysfs_dump_command
    from kiln.fleet import NodeResult, Status

    cluster = require_valid(inventory(tmp_path / "inv"))
    reads: list[str] = []
    after = {"gpu002": {"mlx5_0": {}, "mlx5_1": {"counters": {"link_downed": 2}}}}

    def fetched(node: str) -> dict:
        files = {f"gemm/{node}.json": GEMM.read_text()}
        for pair in campaign.ib_pairs:
            if pair.client == node:
                for rail in pair.rails:
                    slow = rail.rail == 1 and "gpu003" in (pair.client, pair.server)
                    report = ROCE_98 if slow else HDR_195
                    files[f"ib/{pair.name}-rail{rail.rail}.txt"] = report.read_text()
        return files

    def over_ssh(nodes, command):
        results = []
        for node in nodes:
            if command == sysfs_dump_command():
                phase = "after" if reads.count(node.name) else "before"
                reads.append(node.name)
                ports = (after if phase == "after" else {}).get(node.name, HEALTHY)
                text = dump(tmp_path / "sysfs" / node.name / phase, ports)
            else:  # the fetch of results
                text = json.dumps(fetched(node.name))
            results.append(NodeResult(node.name, node.address, Status.OK, 0, text))
        return results

    monkeypatch.setattr(collect, "run_as_root", over_ssh)
    outcome = C.BurninOutcome(
        "RUN", tmp_path / "run", resolve_suite(cluster.burnin), NODES, BurninReport(cluster.name)
    )
    ctl = RecordingController()
    options = C.BurninOptions(poll_seconds=0)
    campaign = C._Campaign(cluster, options, ctl, outcome, lambda _: None, {})
    campaign.run()

    assert sorted(reads) == sorted(NODES * 2)
    scripts = [c for c in ctl.commands if c.startswith("sbatch")]
    ib_jobs = [s for s in scripts if "kiln-burnin-ib" in s]
    assert len(ib_jobs) == 3 and all("sbcast --force" in s for s in ib_jobs)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["ib"]["nodes"] == NODES and len(manifest["ib"]["pairs"]) == 6
    assert (tmp_path / "run" / "ib" / "sysfs-after" / "gpu002.txt").is_file()
    assert outcome.drained == {
        "gpu002": "kiln: ib rail1 mlx5_1 port 1 errors rose: link_downed +2",
        "gpu003": "kiln: ib rail1 mlx5_1 98.0 Gb/s < floor 180 (slow with 3/3 peers)",
    }
    drains = [c for c in ctl.commands if "state=drain" in c]
    assert drains == [
        "scontrol update nodename=gpu002 state=drain "
        "'reason=kiln: ib rail1 mlx5_1 port 1 errors rose: link_downed +2'",
        "scontrol update nodename=gpu003 state=drain "
        "'reason=kiln: ib rail1 mlx5_1 98.0 Gb/s < floor 180 (slow with 3/3 peers)'",
    ]
    assert ctl.commands[-1] == "scontrol delete reservationname=kiln-burnin-run"


def test_the_command_composes_install_run_judge_and_report(tmp_path, monkeypatch):
    """`kiln burnin`'s steps in order: the runtime on the selected nodes, the campaign through
    kiln.slurmctl's controller (a kiln-drained node tested, an operator's drain skipped), the
    judged report.json, then report.xml and report.html beside it."""
    from kiln.commands import burnin as command
    from kiln.fleet import NodeResult, Status
    from kiln.slurmctl.state import NodeState

    cluster = require_valid(SANDBOX)
    nodes = [n.name for n in cluster.compute]
    steps: list[str] = []

    class Slurm(RecordingController):
        def show(self, names):
            steps.append(f"show {','.join(names)}")
            return {
                nodes[0]: NodeState(nodes[0], "idle+drain", "kiln: maintenance"),
                nodes[1]: NodeState(nodes[1], "idle+drain", "bad DIMM; kiln: said so"),
                **{n: NodeState(n, "idle") for n in nodes[2:]},
            }

    def controller(cluster, root):
        steps.append(f"root={root}")
        return ctl

    def install(cluster, names, paths):
        steps.append(f"install {','.join(names)}")

    def over_ssh(group, command):  # every node answers the fetch with no results
        return [NodeResult(n.name, n.address, Status.OK, 0, "{}") for n in group]

    ctl = Slurm()
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(command, "install_runtime", install)
    monkeypatch.setattr(C, "Controller", controller)
    monkeypatch.setattr(collect, "run_as_root", over_ssh)

    options = C.BurninOptions(poll_seconds=0)
    outcome = command.burn_in(cluster, options, install=True, progress=lambda _: None)

    assert steps == [f"install {','.join(nodes)}", "root=True", f"show {','.join(nodes)}"]
    assert outcome.nodes == [nodes[0], *nodes[2:]]
    assert outcome.skipped == {nodes[1]: "drained by someone else (bad DIMM; kiln: said so)"}
    assert f"scontrol update nodename={nodes[0]} state=resume" in ctl.commands
    assert list(outcome.timings)[:2] == ["runtime", "total"]
    assert not outcome.report.passed  # no results came back: every tested node fails
    for name in ("report.json", "report.xml", "report.html"):
        assert (outcome.run_dir / name).is_file()
