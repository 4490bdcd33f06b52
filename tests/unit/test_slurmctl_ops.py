"""drain/resume decisions against a stand-in controller; kiln resumes only what kiln drained.

FakeSlurm is a test double of the controller's shell: it takes the script kiln would send over
SSH, splits each framed step with shlex (so quoting is exercised exactly), applies `scontrol
update` to its node table and answers `sinfo` in kiln's format.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kiln.errors import ExitCode, InvalidInputError, OperationFailed
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.render.hostlist import expand
from kiln.slurmctl import commands, drain, resume
from kiln.slurmctl.cas import MARK
from kiln.slurmctl.remote import Controller
from kiln.slurmctl.state import from_sinfo
from slurm_inventory import slurm_cluster

# Recorded from Slurm 22.05.8 (Debian 12) in the kiln sandbox with
# `sinfo --noheader --format '%N|%T|%G|%u|%H|%E'`, after a hand drain with a hostile reason.
SANDBOX_SINFO = """\
kd-node02|drained|(null)|root|2026-11-30T03:19:14|x|y "q" ; $(id)
kd-node01|idle|(null)|Unknown|Unknown|none
"""
SANDBOX_SINFO_IDLE = "kd-node[01-02]|idle|(null)|Unknown|Unknown|none\n"

STEP = re.compile(r"""^echo '@@kiln-step (\d+)'; (.*); echo "@@kiln-step-rc \$\?"$""")


class FakeSlurm:
    """A controller that knows `nodes` (name -> [state, reason, user, time, gres])."""

    def __init__(self, nodes: dict[str, list[str]]) -> None:
        self.nodes = nodes
        self.calls: list[list[list[str]]] = []

    def sinfo(self) -> str:
        return "".join(
            f"{name}|{state}|{gres}|{user}|{time}|{reason}\n"
            for name, (state, reason, user, time, gres) in self.nodes.items()
        )

    def step(self, argv: list[str]) -> tuple[int, str]:
        if argv[0] == "sinfo":
            return 0, self.sinfo()
        assert argv[:2] == ["scontrol", "update"], argv
        args = dict(arg.split("=", 1) for arg in argv[2:])
        for name in expand(args["nodename"]):
            node = self.nodes[name]
            if args["state"] == "drain":
                node[0] = "draining" if node[0] in ("mixed", "allocated") else "drained"
                node[1:4] = [args["reason"], "root", "2026-11-30T10:00:00"]
            elif args["state"] == "resume":
                node[0] = "idle" if node[0] == "drained" else "mixed"
                node[1:4] = ["none", "Unknown", "Unknown"]
        return 0, ""

    def cas(self, command: str) -> str:
        """kiln.slurmctl.cas's compare-and-set program, applied to the node table (the bash
        itself runs against stand-ins in test_slurmctl_cas): one scontrol update per change
        still as expected, recorded as a step; a 'kept' line for any other."""
        tokens = shlex.split(command)
        args = tokens[tokens.index("kiln-cas") + 1 :]
        steps, lines = [], []
        for name, expected, target in zip(args[0::3], args[1::3], args[2::3], strict=True):
            state, reason = self.nodes[name][0], self.nodes[name][1]
            held = "drain" in state
            if (not held and expected == "-") or (held and expected == "=" + reason):
                verb = (
                    ["state=resume"] if target == "-" else ["state=drain", "reason=" + target[1:]]
                )
                steps.append(["scontrol", "update", f"nodename={name}", *verb])
                self.step(steps[-1])
                lines.append(f"{MARK} {name} applied")
            else:
                lines.append(f"{MARK} {name} kept {state}|{reason}")
        self.calls.append(steps)
        return "\n".join(lines) + "\n"

    def __call__(self, nodes, command, *, fanout, timeout) -> ExecResult:
        assert [node.name for node in nodes] == ["ctl"] and fanout == 1
        if "kiln-cas" in command:
            result = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, 0, stdout=self.cas(command))
            return ExecResult(command, [result], 0.1, fanout, timeout)
        steps = []
        out = []
        for line in command.splitlines():
            index, middle = STEP.match(line).groups()
            argv = shlex.split(middle)
            steps.append(argv)
            code, text = self.step(argv)
            out.append(f"@@kiln-step {index}\n{text}@@kiln-step-rc {code}\n")
        self.calls.append(steps)
        result = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, exit_code=0, stdout="".join(out))
        return ExecResult(command, [result], 0.1, fanout, timeout)


@pytest.fixture
def cluster(tmp_path: Path):
    return slurm_cluster(tmp_path)


def slurm() -> FakeSlurm:
    # Derived from scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt (real): the same nodes
    # and states in kiln's sinfo format; cricket is given a kiln drain for these tests.
    return FakeSlurm({
        "cortex-01": ["allocated", "none", "Unknown", "Unknown", "gpu:m60:8"],
        "dumfries-002": ["allocated", "none", "Unknown", "Unknown", "gpu:rtx2080:4"],
        "oxygen-04": ["drained", "memory issues?", "root", "2019-01-29T10:42:12", "(null)"],
        "cricket": ["drained", "kiln: gemm gpu0 low (by alice)", "root", "2026-11-29T09:00:00",
                    "gpu:quadro:1(S:0),vmem:2G"],
    })  # fmt: skip


def pick(cluster, *names):
    return [cluster.node(name) for name in names]


def by_name(result):
    return {change.name: change for change in result.nodes}


def test_drain_stores_kiln_reason_and_reports_before_and_after(cluster):
    fake = slurm()
    result = drain(cluster, pick(cluster, "cortex-01"), 'disk "swap"; now', user="bob",
                   runner=fake)  # fmt: skip
    assert fake.calls[0] == [["sinfo", "--noheader", "--format", "%N|%T|%G|%u|%H|%E"]]
    assert fake.calls[1][0] == [
        "scontrol", "update", "nodename=cortex-01", "state=drain",
        'reason=kiln:operator:bob: disk "swap"; now',
    ]  # fmt: skip
    change = by_name(result)["cortex-01"]
    assert (change.before.state, change.after.state, change.action) == (
        "allocated", "draining", "drain",
    )  # fmt: skip
    assert "jobs running" in change.message and result.ok
    assert change.after.drained_by_kiln and change.after.drained_by == "bob"


def test_drain_keeps_someone_elses_drain_reason(cluster):
    fake = slurm()
    result = drain(cluster, pick(cluster, "oxygen-04", "cricket"), "fan", user="bob",
                   runner=fake)  # fmt: skip
    changes = by_name(result)
    assert changes["oxygen-04"].action == "kept" and changes["oxygen-04"].ok
    assert "memory issues?" in changes["oxygen-04"].message
    assert fake.nodes["oxygen-04"][1] == "memory issues?"  # never taken over by kiln
    assert fake.calls[1][0][2] == "nodename=cricket"  # kiln's own drain: reason refreshed


def test_bad_reason_is_refused_before_any_ssh(cluster):
    fake = slurm()
    with pytest.raises(InvalidInputError) as caught:
        drain(cluster, pick(cluster, "cricket"), "two\nlines", runner=fake)
    assert caught.value.exit_code is ExitCode.INVALID_INPUT and fake.calls == []


def test_resume_refuses_a_hand_drain_naming_who_when_why(cluster):
    fake = slurm()
    result = resume(cluster, pick(cluster, "cortex-01", "oxygen-04", "cricket"), runner=fake)
    changes = by_name(result)
    assert not result.ok
    refused = changes["oxygen-04"]
    assert refused.action == "refused" and not refused.ok
    assert "root" in refused.message and "2019-01-29T10:42:12" in refused.message
    assert "memory issues?" in refused.message and "--force" in refused.message
    assert changes["cortex-01"].action == "none" and changes["cortex-01"].ok
    assert "already available" in changes["cortex-01"].message
    assert changes["cricket"].action == "resume" and changes["cricket"].after.state == "idle"
    assert fake.calls[1][0] == ["scontrol", "update", "nodename=cricket", "state=resume"]
    assert fake.nodes["oxygen-04"][0] == "drained"


def test_resume_force_resumes_a_hand_drain(cluster):
    fake = slurm()
    result = resume(cluster, pick(cluster, "oxygen-04"), force=True, runner=fake)
    change = by_name(result)["oxygen-04"]
    assert result.ok and change.action == "resume" and change.after.state == "idle"
    assert change.message.startswith("forced: was drained by root")


def test_nodes_unknown_to_slurm(cluster):
    fake = slurm()
    result = resume(cluster, pick(cluster, "ctl", "gpu-new"), runner=fake)
    changes = by_name(result)
    assert changes["ctl"].ok and "not a Slurm compute node" in changes["ctl"].message
    assert not changes["gpu-new"].ok and changes["gpu-new"].action == "unknown"
    assert fake.calls[1] == [fake.calls[0][0]]  # only the state read again: no update sent


def test_unreachable_controller_is_an_operation_failure(cluster):
    def down(nodes, command, **_):
        result = NodeResult("ctl", "10.0.0.1", CommandOutcome.UNREACHABLE, error="port 22: refused")
        return ExecResult(command, [result], 0.1, 1, 60)

    with pytest.raises(OperationFailed, match="ctl: unreachable: port 22: refused"):
        resume(cluster, pick(cluster, "cricket"), runner=down)


def test_sinfo_parsing_of_recorded_sandbox_output():
    nodes = from_sinfo(SANDBOX_SINFO)
    node2 = nodes["kd-node02"]
    assert node2.drained and not node2.drained_by_kiln
    assert (node2.reason, node2.reason_user, node2.reason_time) == (
        'x|y "q" ; $(id)', "root", "2026-11-30T03:19:14",
    )  # fmt: skip
    assert nodes["kd-node01"].reason is None and not nodes["kd-node01"].drained
    assert list(from_sinfo(SANDBOX_SINFO_IDLE)) == ["kd-node01", "kd-node02"]
    assert from_sinfo("") == {}


def test_states_with_suffixes_and_flags():
    # derived lines (not recorded): state spellings with the not-responding suffix and a flag
    nodes = from_sinfo(
        "a1|down*|(null)|Unknown|Unknown|Not responding\n"
        "a2|draining|gpu:h100:8(S:0-1)|root|2026-01-01T00:00:00|kiln: x (by ann)\n"
        "a3|idle+drain|(null)|slurm|2026-01-01T00:00:00|Low RealMemory\n"
    )
    assert not nodes["a1"].responding and not nodes["a1"].drained and nodes["a1"].base == "down"
    assert nodes["a2"].drained_by_kiln and nodes["a2"].gpus == 8 and nodes["a2"].drained_by == "ann"
    assert nodes["a3"].drained and nodes["a3"].drained_by == "slurm"


SHOWN = """\
NodeName=cricket Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN ThreadsPerCore=1
   Reason=kiln: gemm gpu0 low (by alice) [root@2026-11-29T09:00:00]
"""


def test_burnin_s_controller_runs_as_root_submits_and_reads_the_nodes(cluster, monkeypatch):
    """Burn-in uses this same controller: sudo unless the SSH user is root (no ansible_user
    here: kiln's login user, `ops`), sbatch's job id, `scontrol show node` read into NodeStates."""
    monkeypatch.setattr("kiln.fleet.ssh.getpass.getuser", lambda: "ops")
    sent: list[str] = []

    def runner(nodes, command, *, fanout, timeout) -> ExecResult:
        sent.append(command)
        script = shlex.split(command)[-1]  # sudo -n sh -c SCRIPT
        out = (
            "4242\n"
            if script.startswith("sbatch ")
            else f"@@kiln-step 0\n{SHOWN}@@kiln-step-rc 0\n"
        )
        if "fail.sh" in script:
            out = "sbatch: error: Batch job submission failed\n"
        result = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, exit_code=0, stdout=out)
        return ExecResult(command, [result], 0.1, fanout, timeout)

    ctl = Controller(cluster, runner=runner, root=True)
    assert ctl.submit("#!/bin/bash\ntrue\n", "node-g0") == "4242"
    shown = ctl.show(["cricket"])
    assert all(command.startswith("sudo -n sh -c ") for command in sent)
    assert shlex.split(sent[0])[-1] == commands.sbatch("#!/bin/bash\ntrue\n")
    assert "scontrol show node cricket" in shlex.split(sent[1])[-1]
    assert shown["cricket"].drained_by_kiln and shown["cricket"].drained_by == "alice"
    with pytest.raises(OperationFailed, match="sbatch of ib-r0 printed no job id"):
        ctl.submit("#!/bin/bash\n# fail.sh\n", "ib-r0")


# Drains kiln placed for other operations (derived: the grammar of kiln.parsers.drain_reason).
OTHER_DRAINS = {
    "quarantine": "kiln:quarantine:20261130T101500Z-3f9a1c: new node, quarantined until "
    "burn-in passes",
    "burnin": "kiln:burnin:20261130T111500Z-77aa01: gemm gpu3 612 TFLOPS < floor 700",
    "burnin (older kiln)": "kiln: gemm gpu3 612 TFLOPS < floor 700",
    "maintenance": "kiln:maintenance:20261130T121500Z-0b0b0b: driver upgrade 550 -> 570",
    "health": "kiln:health:20261130T131500Z-c0ffee: xid 79",
}


@pytest.mark.parametrize("kind", list(OTHER_DRAINS))
def test_kiln_drain_takes_over_no_drain_of_another_operation(cluster, kind):
    """`kiln drain` over a quarantine would let `kiln resume` put an untested node in service:
    the node keeps the reason it has."""
    fake = slurm()
    fake.nodes["cricket"][1] = OTHER_DRAINS[kind]
    change = by_name(drain(cluster, pick(cluster, "cricket"), "fan", user="bob", runner=fake))[
        "cricket"
    ]
    assert change.action == "kept" and change.ok
    assert fake.nodes["cricket"][1] == OTHER_DRAINS[kind]
    assert len(fake.calls[1]) == 1  # only the state read again: no update sent


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        # who placed it and who lifts it, in the drain policy's words (drain_reason.POLICY)
        ("quarantine", "lifted when the node passes a burn-in: `kiln burnin` resumes it then"),
        ("burnin", "the node failed a check; lifted when the node passes a later burn-in"),
        ("burnin (older kiln)", "lifted when the node passes a later burn-in"),
        ("maintenance", "a rolling change (slurm_maintenance"),
        ("health", "the health check (Slurm's HealthCheckProgram"),
    ],
)
def test_resume_refuses_drains_other_operations_placed(cluster, kind, says):
    fake = slurm()
    fake.nodes["cricket"][1] = OTHER_DRAINS[kind]
    result = resume(cluster, pick(cluster, "cricket"), runner=fake)
    change = by_name(result)["cricket"]
    assert change.action == "refused" and not result.ok
    assert says in change.message and "--force" in change.message
    assert fake.nodes["cricket"][0] == "drained"
    forced = resume(cluster, pick(cluster, "cricket"), force=True, runner=fake)
    assert by_name(forced)["cricket"].action == "resume" and fake.nodes["cricket"][0] == "idle"


def test_resume_resumes_kiln_drain_s_operator_drains_new_and_old(cluster):
    fake = slurm()
    drain(cluster, pick(cluster, "cortex-01"), "fan", user="bob", runner=fake)
    assert fake.nodes["cortex-01"][1] == "kiln:operator:bob: fan"
    result = resume(cluster, pick(cluster, "cortex-01", "cricket"), runner=fake)
    assert result.ok and result.counts() == {"resume": 2}  # cricket: "kiln: ... (by alice)"


def test_status_json_names_the_drain_kind_and_operation():
    nodes = from_sinfo(
        "n1|drained|(null)|root|2026-11-30T10:00:00|"
        "kiln:burnin:20261130T111500Z-77aa01: gemm gpu3 low\n"
    )
    doc = nodes["n1"].to_dict()
    assert doc["drain"] == {
        "kind": "burnin", "operation": "20261130T111500Z-77aa01", "why": "gemm gpu3 low",
    }  # fmt: skip
    assert doc["drained_by_kiln"] and doc["drained_by"] == "root"


def scontrol_answer(stdout: str, code: int, stderr: str = ""):
    def runner(nodes, command, *, fanout, timeout) -> ExecResult:
        out = f"@@kiln-step 0\n{stdout}@@kiln-step-rc {code}\n"
        result = NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, 0, out, stderr)
        return ExecResult(command, [result], 0.1, fanout, timeout)

    return runner


def test_reading_nodes_fails_closed_in_slurm_s_words(cluster):
    """A controller that cannot be contacted is an error naming Slurm's message, never "not in
    Slurm"; Slurm's own "not found" is the only answer that means it does not know a node."""
    # Slurm 22.05's texts: slurm_perror on stderr; printf("Node %s not found") on stdout.
    down = "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"
    ctl = Controller(cluster, runner=scontrol_answer("", 1, down))
    with pytest.raises(
        OperationFailed, match=r"exited 1: slurm_load_node error: Unable to contact"
    ):
        ctl.show(["cricket"])
    ctl = Controller(cluster, runner=scontrol_answer("", 1, ""))
    with pytest.raises(OperationFailed, match="exited 1: no output"):
        ctl.show(["cricket"])
    ctl = Controller(cluster, runner=scontrol_answer("Node gpu-new not found\n", 1))
    assert ctl.show(["gpu-new"]) == {}
    both = f"{SHOWN}Node gpu-new not found\n"
    ctl = Controller(cluster, runner=scontrol_answer(both, 1))
    assert list(ctl.show(["cricket", "gpu-new"])) == ["cricket"]


def test_resume_is_a_compare_and_set_a_drain_changed_in_between_is_kept(cluster):
    """`kiln resume` read cortex-01 drained by bob; before its update arrives, the health check
    drains it again with its own reason: the resume is not applied, the new reason stays."""
    fake = slurm()
    drain(cluster, pick(cluster, "cortex-01"), "fan", user="bob", runner=fake)
    health = "kiln:health:H1: xid 79"

    class Meanwhile(type(fake)):
        def cas(self, command: str) -> str:
            self.nodes["cortex-01"][1] = health  # placed between kiln's read and its update
            return super().cas(command)

    fake.__class__ = Meanwhile
    result = resume(cluster, pick(cluster, "cortex-01"), runner=fake)
    change = by_name(result)["cortex-01"]
    assert change.action == "kept" and not result.ok
    assert "drain" in fake.nodes["cortex-01"][0] and fake.nodes["cortex-01"][1] == health
    assert "changed meanwhile" in change.message and health in change.message
