"""The campaign against Slurm and SSH doubles: an interrupt cancels, restores kiln's drains and
deletes the reservation; every per-node job is pinned to its node and a result from another host
is rejected; a busy node is "not tested (busy)", never drained, and the run exits 1."""

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
from node_fetch import node_answer
from slurm_doubles import Drains

SANDBOX = Path(__file__).resolve().parents[2] / "inventories" / "sandbox"


class FakeController(Drains):
    """kiln.slurmctl's Controller, answered: each command recorded as its shell line; the
    window and compare-and-set programs change the drains (slurm_doubles.Drains)."""

    def __init__(self, fail_on: str, reasons: dict) -> None:
        super().__init__(reasons)
        self.commands: list[str] = []
        self.fail_on = fail_on

    def run(self, steps, *, check: bool = True) -> list[Step]:
        answers = []
        for argv in steps:
            self.commands.append(shlex.join(argv))
            polling = argv[0] == "squeue" and any(a.startswith("--jobs=") for a in argv)
            if argv[0] == self.fail_on and (polling or argv[0] != "squeue"):
                raise KeyboardInterrupt
            answers.append(Step(tuple(argv), 0, ""))
        return answers

    def shell(self, text: str, what: str, *, timeout: float | None = None) -> str:
        answer = super().shell(text, what, timeout=timeout)  # the program runs on regardless
        if self.fail_on == "window":
            raise KeyboardInterrupt
        return answer

    def submit_many(self, scripts, what: str) -> tuple[list[str | None], str]:
        self.commands += [commands.sbatch(script).splitlines()[0] for script in scripts]
        if self.fail_on == "sbatch":
            raise KeyboardInterrupt
        return ["17"] * len(scripts), ""


@pytest.mark.parametrize("fail_on", ["sbatch", "window", "squeue"])
def test_an_interrupt_cancels_deletes_the_reservation_and_never_leaves_a_drain_lifted(
    tmp_path, fail_on
):
    """Ctrl-C (or SIGTERM: kiln.errors.Terminated is a KeyboardInterrupt) at the submission,
    inside the window or while polling: the jobs are cancelled and the reservation deleted,
    and the quarantined node holds its drain throughout: kiln never resumes it by itself, only
    the window program lifts it, and that program puts it back on the controller."""
    cluster = require_valid(SANDBOX)
    nodes = [n.name for n in cluster.compute]
    outcome = C.BurninOutcome(
        "RUN", tmp_path, resolve_suite(cluster.burnin), nodes, BurninReport(cluster.name)
    )
    quarantine = "kiln: quarantined until burn-in passes"
    ctl = FakeController(fail_on, {nodes[0]: quarantine})
    drained = {nodes[0]: quarantine}
    campaign = C._Campaign(cluster, C.BurninOptions(), ctl, outcome, lambda _: None, drained)
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    res = "kiln-burnin-run"
    assert ctl.commands[0].startswith(f"scontrol create reservation reservationname={res} ")
    assert ctl.commands[1].startswith("squeue --noheader --all '--nodelist=")  # busy nodes?
    assert not any("state=resume" in c or "state=drain" in c for c in ctl.commands)
    assert ctl.reasons == {nodes[0]: quarantine}
    windows = [p for p in ctl.programs if p[0] == "window"]
    assert windows == ([] if fail_on == "sbatch" else [("window", [nodes[0]], ["17"] * 2)])
    assert ctl.commands[-1] == f"scontrol delete reservationname={res}"
    if fail_on != "sbatch":  # submitted jobs are cancelled first
        assert any(c.startswith("scancel 17") for c in ctl.commands)


class RecordingController(Drains):
    """Slurm on the controller, answered: job ids for sbatch, an empty queue for squeue."""

    def __init__(self, reasons: dict | None = None) -> None:
        super().__init__(reasons or {})
        self.commands: list[str] = []

    def run(self, steps, *, check: bool = True) -> list[Step]:
        self.commands += [shlex.join(argv) for argv in steps]
        return [Step(tuple(argv), 0, "") for argv in steps]

    def submit_many(self, scripts, what: str) -> tuple[list[str | None], str]:
        ids = []
        for script in scripts:
            self.commands.append(commands.sbatch(script))
            ids.append(str(len(self.commands)))
        return ids, ""


def test_infiniband_nodes_are_read_before_and_after_and_their_rails_run_in_rounds(
    tmp_path, monkeypatch
):
    """The whole campaign on four HCA nodes, SSH and Slurm answered by doubles: the HCAs are
    read before the jobs (names for ib_write_bw) and after (counters), the Locator's ib rounds
    are submitted one at a time (two here), the clients' reports come back after each, and the
    slow HCA is drained, its partner of round one not."""
    import json

    from ib_doubles import GEMM, HDR_195, HEALTHY, NODES, ROCE_98, dump, inventory
    from kiln.burnin import dcgm
    from kiln.fabric.links import sysfs_dump_command
    from kiln.fleet import CommandOutcome, NodeResult

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
            if command == dcgm.PROBE:  # these GPU nodes have no DCGM: not validated
                text = f"{dcgm.MARK} absent\n{dcgm.MARK} host {node.name}\n"
            elif command == sysfs_dump_command():
                phase = "after" if reads.count(node.name) else "before"
                reads.append(node.name)
                ports = (after if phase == "after" else {}).get(node.name, HEALTHY)
                text = dump(tmp_path / "sysfs" / node.name / phase, ports)
            else:  # the fetch of results
                text = node_answer(fetched(node.name))
            results.append(NodeResult(node.name, node.address, CommandOutcome.OK, 0, text))
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
    assert len(ib_jobs) == 2 and all("sbcast --force" in s for s in ib_jobs)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["ib"]["nodes"] == NODES
    # the Locator's rounds: everyone once, then gpu003 (slow on rail 1 with gpu002) and gpu002
    # each with another peer: gpu003 slow again, gpu002 fine (cleared); no third round
    assert [(p["client"], p["server"]) for p in manifest["ib"]["pairs"]] == [
        ("gpu001", "gpu004"), ("gpu002", "gpu003"), ("gpu001", "gpu002"), ("gpu003", "gpu004"),
    ]  # fmt: skip
    assert (tmp_path / "run" / "ib" / "sysfs-after" / "gpu002.txt").is_file()
    assert outcome.drained == {  # kind burnin, this run's id
        "gpu002": "kiln:burnin:RUN: ib rail1 mlx5_1 port 1 errors rose: link_downed +2",
        "gpu003": "kiln:burnin:RUN: ib rail1 mlx5_1 98.0 Gb/s < floor 180 (slow with 2/2 peers)",
    }
    assert ctl.reasons == outcome.drained  # placed by the compare-and-set: in service before
    assert ctl.commands[-1] == "scontrol delete reservationname=kiln-burnin-run"
    # not run is never passed: a GPU node without dcgmi is not validated, so the run did not
    # test it (incomplete, exit 1); the drains above stand
    assert outcome.not_tested == {
        node: "not validated: dcgm r1 could not run: dcgmi is not installed on this GPU node "
        "(the nvidia_dcgm role)"
        for node in NODES
    }
    assert not outcome.report.passed


QUARANTINED = "kiln:quarantine:20261130T101500Z-3f9a1c: new node, quarantined until burn-in passes"


@pytest.mark.parametrize(
    ("reason", "tested"),
    [
        (QUARANTINED, True),
        ("kiln:burnin:20261130T111500Z-77aa01: gemm gpu3 612 TFLOPS < floor 700", True),
        ("kiln: new node, quarantined until burn-in passes", True),  # older kiln
        ("kiln: gemm gpu3 612 TFLOPS < floor 700", True),  # older kiln: a failed burn-in
        ("kiln:operator:alice: disk swap", False),
        ("kiln: disk swap (by alice)", False),
        ("kiln:maintenance:20261130T121500Z-0b0b0b: driver upgrade 550 -> 570", False),
        ("kiln: driver upgrade 550.90.07 -> 570.124.06", False),
        ("kiln:health:20261130T131500Z-c0ffee: xid 79", True),  # a passing burn-in clears it
        ("bad DIMM; kiln: said so", False),
    ],
)
def test_burnin_tests_only_the_drains_the_policy_lets_it_lift(reason, tested):
    """Burn-in tests under its drain, and resumes on a pass, only a node whose drain the drain
    policy lets burn-in lift (kiln.parsers.drain_reason.POLICY): a quarantine, a failed burn-in
    or a failed health check; never an operator's, a maintenance's or anyone else's."""
    from kiln.burnin.nodes import classify
    from kiln.slurmctl.state import NodeState

    usable, lifted, skipped = classify({"n1": NodeState("n1", "idle+drain", reason)}, ["n1"])
    assert (usable == ["n1"], lifted == {"n1": reason}, "n1" in skipped) == (
        tested, tested, not tested,
    )  # fmt: skip


def test_the_command_composes_install_run_judge_and_report(tmp_path, monkeypatch):
    """`kiln burnin`'s steps in order: the runtime on the selected nodes, the campaign through
    kiln.slurmctl's controller (a kiln-drained node tested, an operator's drain skipped), the
    judged report.json, then report.xml and report.html beside it."""
    from kiln.commands import burnin as command
    from kiln.fleet import CommandOutcome, NodeResult
    from kiln.slurmctl.state import NodeState

    cluster = require_valid(SANDBOX)
    nodes = [n.name for n in cluster.compute]
    steps: list[str] = []

    class Slurm(RecordingController):
        def show(self, names):
            steps.append(f"show {','.join(names)}")
            return {
                nodes[0]: NodeState(nodes[0], "idle+drain", QUARANTINED),
                nodes[1]: NodeState(nodes[1], "idle+drain", "bad DIMM; kiln: said so"),
                **{n: NodeState(n, "idle") for n in nodes[2:]},
            }

    def controller(cluster, root):
        steps.append(f"root={root}")
        return ctl

    held = object()  # the command's lock, handed down to the runtime's stage run

    def install(cluster, names, paths, lock):
        assert lock is held
        steps.append(f"install {','.join(names)}")

    def over_ssh(group, command):  # every node answers the fetch with no results
        return [NodeResult(n.name, n.address, CommandOutcome.OK, 0, node_answer({})) for n in group]

    ctl = Slurm({nodes[0]: QUARANTINED, nodes[1]: "bad DIMM; kiln: said so"})
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(command, "install_runtime", install)
    monkeypatch.setattr(C, "Controller", controller)
    monkeypatch.setattr(collect, "run_as_root", over_ssh)

    options = C.BurninOptions(poll_seconds=0)
    outcome = command.burn_in(cluster, options, install=True, progress=lambda _: None, lock=held)

    assert steps[:3] == [f"install {','.join(nodes)}", "root=True", f"show {','.join(nodes)}"]
    assert outcome.nodes == [nodes[0], *nodes[2:]]
    assert outcome.skipped == {nodes[1]: "drained by someone else (bad DIMM; kiln: said so)"}
    windows = [p for p in ctl.programs if p[0] == "window"]
    assert windows and all(p[1] == [nodes[0]] for p in windows)  # its jobs started under it
    assert not any("state=resume" in c for c in ctl.commands)
    assert ctl.reasons[nodes[0]].startswith("kiln:burnin:")  # it failed: a burn-in drain now
    assert list(outcome.timings)[:2] == ["runtime", "total"]
    assert not outcome.report.passed  # no results came back: every tested node fails
    for name in ("report.json", "report.xml", "report.html"):
        assert (outcome.run_dir / name).is_file()


# -- every per-node test on the node it names; busy nodes not tested, never drained ---------

CPU2 = Path(__file__).resolve().parents[1] / "fixtures" / "burnin" / "cpu2" / "run"
NODE1, NODE2 = "kiln-node01", "kiln-node02"


def gemm_doc(host: str | None) -> str:
    """The recorded CPU GEMM document, with the host the job wrapper says it ran on."""
    import json

    doc = json.loads((CPU2 / "gemm" / "kiln-node01.json").read_text())
    if host is not None:
        doc["host"] = host
    return json.dumps(doc)


class Slurm(Drains):
    """Slurm on the controller, answered: the jobs holding each node outside the reservation
    (`squeue --nodelist ... --states ...`, one answer per query, the last one repeated), job
    ids for sbatch, the queue of kiln's jobs (`squeue --jobs`: `pending` ids stay PENDING),
    and the drains (slurm_doubles.Drains: `reasons`)."""

    def __init__(self, holding=("",), pending=(), reasons=None) -> None:
        super().__init__(reasons or {})
        self.commands: list[str] = []
        self.holding = list(holding)
        self.pending = set(pending)
        self.scripts: dict[str, str] = {}  # job id -> script

    def _answer(self, argv) -> str:
        if argv[0] != "squeue":
            return ""
        if not any(a.startswith("--jobs=") for a in argv):
            return self.holding.pop(0) if len(self.holding) > 1 else self.holding[0]
        ids = next(a for a in argv if a.startswith("--jobs="))[len("--jobs=") :].split(",")
        return "".join(f"{i}|PENDING|Resources\n" for i in ids if i in self.pending)

    def run(self, steps, *, check: bool = True) -> list[Step]:
        self.commands += [shlex.join(argv) for argv in steps]
        return [Step(tuple(argv), 0, self._answer(argv)) for argv in steps]

    def submit(self, script: str, what: str) -> str:
        self.commands.append(commands.sbatch(script))
        job = str(100 + len(self.scripts))
        self.scripts[job] = script
        return job

    def submit_many(self, scripts, what: str) -> tuple[list[str | None], str]:
        return [self.submit(script, what) for script in scripts], ""

    def node_jobs(self) -> dict[str, str]:
        """The node each per-node job is pinned to -> its script."""
        found = {}
        for script in self.scripts.values():
            if "--job-name=kiln-burnin-node" in script:
                (line,) = [x for x in script.splitlines() if x.startswith("#SBATCH --nodelist=")]
                found[line.split("=", 1)[1]] = script
        return found


def results_from(monkeypatch, files: dict[str, dict[str, str]]) -> None:
    """What each node's fetch returns: node -> {record path: text} (results it holds)."""

    from kiln.fleet import CommandOutcome, NodeResult

    def over_ssh(group, command):
        return [
            NodeResult(n.name, n.address, CommandOutcome.OK, 0, node_answer(files.get(n.name, {})))
            for n in group
        ]

    monkeypatch.setattr(collect, "run_as_root", over_ssh)


def campaign_on(tmp_path, ctl, drained=None, **options):
    cluster = require_valid(SANDBOX)
    outcome = C.BurninOutcome(
        "RUN", tmp_path / "run", resolve_suite(cluster.burnin), [NODE1, NODE2],
        BurninReport(cluster.name),
    )  # fmt: skip
    lines: list[str] = []
    run = C._Campaign(
        cluster, C.BurninOptions(poll_seconds=0, **options), ctl, outcome, lines.append,
        drained or {},
    )  # fmt: skip
    run.run()
    return outcome, lines


class Clock:
    """time.monotonic and time.sleep for the campaign: each reading moves on `step` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_every_per_node_job_is_pinned_to_the_node_it_names(tmp_path, monkeypatch):
    ctl = Slurm()
    fabric = (CPU2 / "allreduce" / "fabric-ring.json").read_text()
    results_from(
        monkeypatch,
        {
            NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1), "allreduce/fabric-ring.json": fabric},
            NODE2: {f"gemm/{NODE2}.json": gemm_doc(NODE2)},
        },
    )
    outcome, _ = campaign_on(tmp_path, ctl)
    jobs = ctl.node_jobs()
    assert sorted(jobs) == [NODE1, NODE2]
    for node, script in jobs.items():
        assert "#SBATCH --nodes=1" in script and "--array" not in script
        assert f"\nnode={node}  # the node this job tests" in script
        assert 'save "$out/gemm/$node.json" stamp ' in script
    assert outcome.report.passed and outcome.report.not_tested == {}


def test_a_result_from_another_host_is_rejected_and_the_node_is_not_tested(tmp_path, monkeypatch):
    """kiln-node02's job ran on kiln-node01 (its result came home from there, the host field
    says so): kiln-node02 is "not tested", naming both hosts, and stays in service."""
    ctl = Slurm()
    fabric = (CPU2 / "allreduce" / "fabric-ring.json").read_text()
    results_from(
        monkeypatch,
        {
            NODE1: {
                f"gemm/{NODE1}.json": gemm_doc(NODE1),
                f"gemm/{NODE2}.json": gemm_doc(NODE1),
                "allreduce/fabric-ring.json": fabric,
            },
        },
    )
    outcome, _ = campaign_on(tmp_path, ctl)
    report = outcome.report
    assert {(v.node, v.check) for v in report.failures} == {(NODE2, "tested")}
    assert report.not_tested == {NODE2: f"not tested: its result came from {NODE1}, not {NODE2}"}
    assert {(v.node, v.check) for v in report.failures} == {(NODE2, "tested")}
    assert outcome.drained == {} and not any("state=drain" in c for c in ctl.commands)
    assert not report.passed  # incomplete
    assert NODE2 not in report.node_profiles and NODE1 in report.node_profiles


def test_a_busy_node_is_not_tested_not_drained_and_the_run_is_incomplete(tmp_path, monkeypatch):
    """kiln-node02 runs job 4711 outside the reservation: no burn-in job is submitted for it,
    the reservation lets it go, it is reported "not tested (busy)" naming the job, and it is
    never drained; kiln-node01 is tested on itself and passes."""
    ctl = Slurm(holding=[f"4711|RUNNING|alice|(null)|{NODE2}\n"])
    results_from(monkeypatch, {NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1)}})
    outcome, lines = campaign_on(tmp_path, ctl)
    assert outcome.drained == {} and not any("state=drain" in c for c in ctl.commands)
    busy = "not tested (busy): job 4711 (alice) runs on it outside the reservation"
    assert outcome.not_tested == {NODE2: busy}
    assert outcome.report.not_tested == {NODE2: busy}
    assert list(ctl.node_jobs()) == [NODE1]
    assert not any(NODE2 in s for s in ctl.scripts.values())  # no job names the busy node
    assert f"scontrol update reservationname=kiln-burnin-run nodes={NODE1}" in ctl.commands
    assert outcome.drained == {} and not any("state=drain" in c for c in ctl.commands)
    assert {(v.node, v.check) for v in outcome.report.failures} == {(NODE2, "tested")}
    assert not outcome.report.passed
    assert any(NODE2 in line and "4711" in line for line in lines)
    assert outcome.to_dict()["not_tested"] == {NODE2: busy}


def test_a_kiln_drained_busy_node_keeps_its_drain(tmp_path, monkeypatch):
    """A node kiln had quarantined that is busy is neither resumed nor tested: its drain stays."""
    quarantine = "kiln: quarantined until burn-in passes"
    ctl = Slurm(holding=["4711|COMPLETING|bob|(null)|kiln-node[01-02]\n"],
                reasons={NODE2: quarantine})  # fmt: skip
    results_from(monkeypatch, {})
    outcome, _ = campaign_on(tmp_path, ctl, {NODE2: quarantine})
    assert sorted(outcome.not_tested) == [NODE1, NODE2]
    assert not any("state=resume" in c or "state=drain" in c for c in ctl.commands)
    assert ctl.programs == [] and ctl.reasons == {NODE2: quarantine}
    assert ctl.scripts == {} and outcome.resumed == []
    assert ctl.commands[-1] == "scontrol delete reservationname=kiln-burnin-run"


def test_a_job_that_never_starts_before_the_deadline_leaves_its_node_not_tested(
    tmp_path, monkeypatch
):
    """Busy in a way squeue did not show at the start: kiln-node02's pinned job is still
    pending at the deadline; it is cancelled and the node is "not tested (busy)", not drained
    (a resumed kiln-drained node gets its drain back)."""
    quarantine = "kiln: quarantined until burn-in passes"
    ctl = Slurm(reasons={NODE2: quarantine})
    ctl.pending = {"101"}  # the second job: kiln-node02's
    results_from(monkeypatch, {NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1)}})
    monkeypatch.setattr(C, "time", Clock(step=600))
    outcome, _ = campaign_on(tmp_path, ctl, {NODE2: quarantine})
    assert ctl.node_jobs()[NODE2] == ctl.scripts["101"]
    assert outcome.not_tested == {
        NODE2: "not tested (busy): its job 101 never started before the deadline (Resources)"
    }
    assert any(c.startswith("scancel") and "101" in c for c in ctl.commands)
    assert outcome.drained == {} and outcome.resumed == []
    assert ("window", [NODE2], ["100", "101"]) in ctl.programs  # lifted only while starting
    assert ctl.reasons == {NODE2: quarantine}  # never tested: its quarantine stands


def test_wait_polls_the_busy_nodes_naming_their_jobs_then_tests_them(tmp_path, monkeypatch):
    holder = f"4711|RUNNING|alice|(null)|{NODE2}\n"
    ctl = Slurm(holding=[holder, holder, ""])
    fabric = (CPU2 / "allreduce" / "fabric-ring.json").read_text()
    results_from(
        monkeypatch,
        {
            NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1), "allreduce/fabric-ring.json": fabric},
            NODE2: {f"gemm/{NODE2}.json": gemm_doc(NODE2)},
        },
    )
    outcome, lines = campaign_on(tmp_path, ctl, wait_minutes=30)
    waiting = [line for line in lines if line.startswith("waiting")]
    assert waiting and all(NODE2 in line and "job 4711" in line for line in waiting)
    assert sorted(ctl.node_jobs()) == [NODE1, NODE2]
    assert outcome.not_tested == {} and outcome.report.passed
    assert not any(c.startswith("scontrol update reservationname") for c in ctl.commands)


def test_wait_gives_up_at_its_timeout(tmp_path, monkeypatch):
    ctl = Slurm(holding=[f"4711|RUNNING|alice|(null)|{NODE2}\n"])
    results_from(monkeypatch, {NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1)}})
    monkeypatch.setattr(C, "time", Clock(step=60))
    outcome, lines = campaign_on(tmp_path, ctl, wait_minutes=5)
    assert list(outcome.not_tested) == [NODE2]
    assert any("gave up" in line and NODE2 in line for line in lines)
    assert list(ctl.node_jobs()) == [NODE1]


def test_kiln_burnin_exits_1_when_a_node_was_not_tested(tmp_path, monkeypatch, capsys):
    import json

    from kiln.commands import burnin as command
    from kiln.slurmctl.state import NodeState

    class Busy(Slurm):
        def show(self, names):
            return {n: NodeState(n, "mixed" if n == NODE2 else "idle") for n in names}

    import shutil

    ctl = Busy(holding=[f"4711|RUNNING|alice|(null)|{NODE2}\n"])
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(C, "Controller", lambda cluster, root: ctl)
    results_from(monkeypatch, {NODE1: {f"gemm/{NODE1}.json": gemm_doc(NODE1)}})
    inventory = tmp_path / "inventory"  # the lock and verdicts kept here, not on a live sandbox
    shutil.copytree(SANDBOX, inventory)
    with (inventory / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write("\nkiln_state:\n  backend: local\n")
    rc = command.burnin(inventory, json=True, skip_runtime=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["drained"] == {} and list(doc["not_tested"]) == [NODE2]
    assert doc["passed"] is False and rc == 1


def test_judging_rejects_results_from_another_host_and_never_drains_an_untested_node():
    """On the 8-node H100 run: gpu001's GEMM says it ran on gpu002, gpu003's node all-reduce
    ran on gpu004, gpu008 (whose job timed out) was busy. Each is "not tested" with its reason,
    has no other verdict, is not drained, and the report round-trips with them."""
    import dataclasses

    from kiln.judging import judge
    from kiln.records.burnin import load_run

    gpu8 = Path(__file__).resolve().parents[1] / "fixtures" / "burnin" / "gpu8"
    cluster = require_valid(gpu8 / "inventory")
    run = load_run(gpu8 / "run")
    run.gemm["gpu001"] = dataclasses.replace(run.gemm["gpu001"], host="gpu002.cluster")
    run.allreduce = [
        dataclasses.replace(a, hosts=("gpu004",)) if a.job == "node-gpu003" else a
        for a in run.allreduce
    ]
    busy = "not tested (busy): job 4711 (alice) runs on it outside the reservation"
    report = judge(
        cluster, run.gemm, run.allreduce, missing_jobs=run.missing_jobs,
        not_tested={"gpu008": busy},
    )  # fmt: skip
    assert report.not_tested == {
        "gpu008": busy,
        "gpu001": "not tested: its result came from gpu002, not gpu001",
        "gpu003": "not tested: its all-reduce ran on gpu004, not gpu003",
    }
    for node in report.not_tested:
        assert [v.check for v in report.verdicts if v.node == node] == ["tested"]
        assert node not in report.drain() and node not in report.node_profiles
    assert "node-gpu003" not in {a.job for a in report.allreduce}
    assert not report.passed and not report.complete
    actions = {v.node: str(v.action) for v in report.failures if v.check == "tested"}
    assert actions == {"gpu008": "none", "gpu001": "investigate", "gpu003": "investigate"}
    again = BurninReport.from_dict(report.to_dict())
    assert again.not_tested == report.not_tested and again.to_dict()["summary"]["not_tested"] == 3


def test_a_drain_placed_during_the_run_survives_it(tmp_path, monkeypatch):
    """An operator drains kiln-node02 (quarantined, under test) and the health check drains
    kiln-node01 (in service, under test) while the jobs run: both fail burn-in (no results
    came back), yet neither reason is overwritten, and both are reported as kept."""
    quarantine = "kiln:quarantine:P1: new node, quarantined until burn-in passes"
    operator, health = "kiln:operator:alice: reseat cable", "kiln:health:H1: xid 79"
    ctl = Slurm(reasons={NODE2: quarantine})

    def meanwhile(group, command):  # the fetch of results, after the jobs ran
        ctl.reasons.update({NODE2: operator, NODE1: health})
        return [NodeResult(n.name, n.address, CommandOutcome.OK, 0, node_answer({})) for n in group]

    from kiln.fleet import CommandOutcome, NodeResult

    monkeypatch.setattr(collect, "run_as_root", meanwhile)
    outcome, lines = campaign_on(tmp_path, ctl, {NODE2: quarantine})
    assert not outcome.report.passed and outcome.drained == {} and outcome.resumed == []
    assert ctl.reasons == {NODE1: health, NODE2: operator}
    assert outcome.kept == {NODE1: f"drained|{health}", NODE2: f"drained|{operator}"}
    assert any("changed by someone else during the run" in line for line in lines)


def test_a_drain_placed_while_a_node_is_lifted_stays_and_the_node_is_not_retested(
    tmp_path, monkeypatch
):
    """The window lifts kiln-node02's quarantine; an operator drains it before its job starts:
    the program keeps the operator's reason, and kiln leaves the node alone from then on."""
    quarantine = "kiln:quarantine:P1: new node, quarantined until burn-in passes"
    operator = "kiln:operator:bob: bad PSU"
    ctl = Slurm(reasons={NODE2: quarantine})
    ctl.during_window = {NODE2: operator}
    results_from(monkeypatch, {})
    outcome, _ = campaign_on(tmp_path, ctl, {NODE2: quarantine})
    windows = [p for p in ctl.programs if p[0] == "window"]
    assert windows[0][1] == [NODE2] and all(NODE2 not in p[1] for p in windows[1:])
    assert ctl.reasons[NODE2] == operator and NODE2 in outcome.kept


def test_a_node_drained_by_hand_between_phases_leaves_the_run_untested(tmp_path, monkeypatch):
    """An operator drains kiln-node01 while its GEMM job runs: its next job could never start,
    so it leaves the run before the fabric phase (no ring of one node is submitted), is not
    tested, and keeps the operator's reason; kiln-node02 is judged as usual."""
    operator = "kiln:operator:carol: swap DIMM"

    class HandDrain(Slurm):
        def run(self, steps, *, check: bool = True):
            if any(a.startswith("--jobs=") for argv in steps for a in argv):
                self.reasons.setdefault(NODE1, operator)  # while the jobs run
            return super().run(steps, check=check)

    ctl = HandDrain()
    results_from(monkeypatch, {NODE2: {f"gemm/{NODE2}.json": gemm_doc(NODE2)}})
    outcome, _ = campaign_on(tmp_path, ctl)
    assert not any("fabric" in script for script in ctl.scripts.values())
    assert outcome.nodes == [NODE2] and outcome.kept == {NODE1: f"idle+drain|{operator}"}
    assert outcome.not_tested[NODE1].startswith("not tested: drained by someone else")
    assert ctl.reasons == {NODE1: operator}  # nothing else drained; its reason intact


def test_a_run_that_lost_its_lock_starts_no_further_phase(tmp_path, monkeypatch):
    """The lock is lost while the GEMM jobs run: the fabric phase is never submitted, the jobs
    are cancelled, the reservation deleted, and the quarantine stands (exit 3 from the error)."""
    from kiln.errors import EnvironmentProblem

    quarantine = "kiln:quarantine:P1: new node, quarantined until burn-in passes"
    ctl = Slurm(reasons={NODE2: quarantine})
    results_from(monkeypatch, {})
    asked = []

    def hold() -> None:
        asked.append(len(ctl.scripts))
        if len(asked) > 1:
            raise EnvironmentProblem("the lock file on kiln-ctl was removed")

    with pytest.raises(EnvironmentProblem, match="removed"):
        campaign_on(tmp_path, ctl, {NODE2: quarantine}, hold=hold)
    assert asked == [0, 2]  # before the GEMM phase, then before the fabric one
    assert not any("fabric" in script for script in ctl.scripts.values())
    assert ctl.commands[-1] == "scontrol delete reservationname=kiln-burnin-run"
    assert ctl.reasons == {NODE2: quarantine}


# -- the pairwise pass: the Locator's rounds, not every node's log2(N) partners --------------


def test_the_pairwise_pass_asks_the_locators_rounds_and_drains_only_the_slow_node(
    tmp_path, monkeypatch
):
    """Six CPU nodes on one leaf, kiln-node04 slow with everyone: the ring has no floor, so the
    pairwise pass runs. Round one pairs everyone once (node04 slow with node03); round two puts
    each suspect with a node of no slow pair on its leaf (node03 fine, node04 slow again); no
    third round (nothing across leaves). Two rounds of 3 and 2 jobs, instead of the 3 rounds of
    9 jobs pair_schedule gives six nodes; only node04 drained, named by its pairs."""
    import json
    import re
    import shutil

    from kiln.fleet import CommandOutcome, NodeResult

    inventory = tmp_path / "inv"
    shutil.copytree(SANDBOX, inventory)
    hosts = inventory / "hosts.yml"
    extra = "".join(
        f"        kiln-node0{i}:\n          ansible_host: 172.31.250.{10 + i}\n"
        f"          kiln_rack: sandbox\n          kiln_gpu_model: none\n"
        f"          kiln_gpu_count: 0\n"
        for i in range(3, 7)
    )
    hosts.write_text(hosts.read_text() + extra)
    cluster = require_valid(inventory)
    nodes = [n.name for n in cluster.compute]
    assert len(nodes) == 6
    ring = json.loads((CPU2 / "allreduce" / "fabric-ring.json").read_text())

    def allreduce(members: list[str], busbw: float) -> str:
        rows = [{**row, "busbw_gbs": busbw} for row in ring["rows"]]
        return json.dumps({**ring, "hosts": members, "world_size": len(members), "rows": rows,
                           "verdict_busbw_gbs": busbw})  # fmt: skip

    ctl = Slurm()
    returned: set[str] = set()

    def over_ssh(group, command):
        """Each node's fetch: its GEMM once, and the all-reduces its jobs left since."""
        out = []
        for node in group:
            files = {}
            if f"gemm/{node.name}" not in returned:
                files[f"gemm/{node.name}.json"] = gemm_doc(node.name)
                returned.add(f"gemm/{node.name}")
            for script in ctl.scripts.values():
                for job in re.findall(r'save "\$out/allreduce/([^"]+)\.json"', script):
                    members = re.search(r"--nodelist=(\S+)", script)[1]
                    if job in returned or not script_first(members, node.name, nodes):
                        continue
                    hosts_in = [n for n in nodes if n in expand(members, nodes)]
                    slow = "kiln-node04" in hosts_in and len(hosts_in) == 2
                    files[f"allreduce/{job}.json"] = allreduce(hosts_in, 1.0 if slow else 100.0)
                    returned.add(job)
            text = node_answer(files)
            out.append(NodeResult(node.name, node.address, CommandOutcome.OK, 0, text))
        return out

    monkeypatch.setattr(collect, "run_as_root", over_ssh)
    outcome = C.BurninOutcome(
        "RUN", tmp_path / "run", resolve_suite(cluster.burnin), nodes, BurninReport(cluster.name)
    )
    C._Campaign(cluster, C.BurninOptions(poll_seconds=0), ctl, outcome, lambda _: None, {}).run()

    pair_jobs = [
        j for s in ctl.scripts.values() for j in re.findall(r"allreduce/(pair-[^\"]+)\.json", s)
    ]
    assert pair_jobs == [
        "pair-r0-kiln-node01--kiln-node06", "pair-r0-kiln-node02--kiln-node05",
        "pair-r0-kiln-node03--kiln-node04",
        "pair-r1-kiln-node01--kiln-node03", "pair-r1-kiln-node02--kiln-node04",
    ]  # fmt: skip
    assert outcome.pair_rounds == 2
    assert list(outcome.drained) == ["kiln-node04"]
    assert outcome.drained["kiln-node04"].startswith("kiln:burnin:RUN: allreduce slow in 2/2")


def expand(members: str, nodes: list[str]) -> set[str]:
    """The nodes a job's --nodelist names (kiln writes hostlists: kiln-node0[1,3])."""
    from kiln.render.hostlist import expand as expand_hostlist

    return set(expand_hostlist(members)) & set(nodes)


def script_first(members: str, node: str, nodes: list[str]) -> bool:
    """Whether `node` is where a job's batch script ran (its first node) and left the result."""
    return min(expand(members, nodes)) == node
