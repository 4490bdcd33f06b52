"""The node lifecycle from kiln's own evidence (issue 33): the events a provision run, a judged
burn-in and an operator add; the append-only log beside the cluster's shared state (its
controller stood in for by LocalRemote: the same shell kiln sends over SSH); and `kiln triage`,
`kiln rma` and `kiln funnel` on it, with their refusals (exit 2 or 3, nothing written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kiln.errors import ExitCode, InvalidInputError
from kiln.lifecycle import LifecycleError, State, funnel, replay
from kiln.lifecycle.derive import BurninEvidence, RunEvidence, after_burnin, after_run, by_operator
from kiln.lifecycle.log import NewerLog, read_lines, to_text
from kiln.state.lifecycle import LifecycleLog, local_directory, run_evidence
from kiln.state.remote import LocalRemote

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example-h100"
NODES = ("gpu001", "gpu002", "gpu003")
T = 1_764_576_000.0  # 2025-12-01T08:00:00Z


def run(run_id, at, joined=NODES, reached=None, quarantined=None) -> RunEvidence:
    if quarantined is None:  # the slurm stage drained every node that joined
        quarantined = {n: "new node" for n in joined}
    return RunEvidence(run_id, at, at + 600, frozenset(reached or joined), frozenset(joined),
                       quarantined)  # fmt: skip


def burnin(run_id, at, passed=(), failed=None, in_service=(), checks=None) -> BurninEvidence:
    return BurninEvidence(run_id, at, frozenset(passed), failed or {}, frozenset(in_service),
                          checks or {})  # fmt: skip


def states(events) -> dict[str, State]:
    return {node: life.state for node, life in replay(events, in_order=True).items()}


def test_a_bring_up_from_declared_to_in_service_then_failed_triage_rma_replaced():
    log = after_run({}, NODES, run(" R1", T, joined=NODES[:2], reached=NODES[:2]))
    assert [(e.node, e.to) for e in log if e.node == "gpu001"] == [
        ("gpu001", s) for s in (State.DECLARED, State.REACHABLE, State.PROVISIONED,
                                State.QUARANTINED)]  # fmt: skip
    assert states(log)["gpu003"] is State.DECLARED  # listed, never answered
    assert (
        after_run(
            replay(log, in_order=True), NODES, run("R2", T + 900, joined=NODES[:2], quarantined={})
        )
        == []
    )
    log += after_burnin(replay(log, in_order=True), burnin(
        "B1", T + 3600, passed=["gpu001"], failed={"gpu002": "gemm 410 TFLOPS < 600"},
        in_service=["gpu001"], checks={"gpu002": "gemm_tflops"}))  # fmt: skip
    assert states(log) == {"gpu001": State.IN_SERVICE, "gpu002": State.FAILED,
                           "gpu003": State.DECLARED}  # fmt: skip
    failed = log[-1]
    assert (failed.to, failed.reason) == (State.FAILED, "gemm_tflops")
    assert failed.evidence == "burn-in B1: gemm 410 TFLOPS < 600"
    # The operator: rma of a node in service is refused, naming both states; of the failed
    # node it goes through triage.
    with pytest.raises(LifecycleError) as refused:
        by_operator(replay(log, in_order=True), "gpu001", State.RMA, "rma by ops: no", T + 4000)
    assert refused.value.message == (
        "gpu001: in_service -> rma is not a transition of the lifecycle"
    )
    assert refused.value.exit_code == ExitCode.INVALID_INPUT
    log += by_operator(
        replay(log, in_order=True), "gpu002", State.RMA, "rma by ops: GPU 3", T + 4000
    )
    assert [e.to for e in log[-2:]] == [State.TRIAGE, State.RMA]
    # A burn-in while it is away does not move it; new parts under the same name do.
    assert after_burnin(replay(log, in_order=True), burnin("B2", T + 5000, passed=["gpu002"])) == []
    changed = {"gpu002": "hardware changed: gpu_serials"}
    log += after_run(replay(log, in_order=True), NODES, run("R3", T + 9000, joined=NODES[:2],
                                             quarantined=changed))  # fmt: skip
    assert [(e.to, e.evidence) for e in log[-2:]] == [
        (State.REPLACED, "run R3: hardware changed: gpu_serials"),
        (State.QUARANTINED, "run R3: hardware changed: gpu_serials"),
    ]
    assert states(log)["gpu002"] is State.QUARANTINED


def test_without_quarantine_a_joined_node_stays_provisioned_until_a_burn_in_passes_it():
    """kiln_slurm.quarantine_new_nodes off: the node joins Slurm in service, untested; the
    lifecycle keeps it provisioned (not proven) until a burn-in passes it."""
    log = after_run({}, ["gpu001"], run("R1", T, joined=["gpu001"], quarantined={}))
    assert states(log)["gpu001"] is State.PROVISIONED
    log += after_burnin(replay(log, in_order=True),
                        burnin("B1", T + 60, passed=["gpu001"], in_service=["gpu001"]))  # fmt: skip
    assert [(e.to, e.inferred) for e in log[-3:]] == [
        (State.QUARANTINED, True), (State.BURNED_IN, False), (State.IN_SERVICE, False)]  # fmt: skip


def test_a_changed_identity_sends_a_node_in_service_back_to_quarantine():
    log = after_run({}, ["gpu001"], run("R1", T, joined=["gpu001"]))
    log += after_burnin(
        replay(log, in_order=True), burnin("B1", T + 60, passed=["gpu001"], in_service=["gpu001"])
    )
    again = after_run(
        replay(log, in_order=True),
        ["gpu001"],
        run(
            "R2", T + 120, joined=["gpu001"], quarantined={"gpu001": "hardware changed: hca_guids"}
        ),
    )
    assert [(e.to, e.identity_change) for e in again] == [(State.QUARANTINED, True)]


def test_a_node_tested_again_after_triage_goes_back_through_quarantine():
    log = after_run({}, ["gpu001"], run("R1", T, joined=["gpu001"]))
    log += after_burnin(
        replay(log, in_order=True), burnin("B1", T + 60, failed={"gpu001": "xid 79"})
    )
    log += by_operator(
        replay(log, in_order=True), "gpu001", State.TRIAGE, "triage by ops: reseat", T + 70
    )
    again = after_burnin(replay(log, in_order=True), burnin("B2", T + 80, passed=["gpu001"],
                                             in_service=["gpu001"]))  # fmt: skip
    assert [e.to for e in again] == [State.QUARANTINED, State.BURNED_IN, State.IN_SERVICE]


def test_a_node_kilns_health_check_drained_failed_before_its_burn_in():
    """The periodic health check drains in Slurm, on the node; the burn-in that tests the node
    under that drain records the failure first, with the check's name as its reason."""
    from kiln.parsers.drain_reason import format_reason

    log = after_run({}, ["gpu001", "gpu002"], run("R1", T, joined=["gpu001", "gpu002"]))
    log += after_burnin(replay(log, in_order=True), burnin(
        "B1", T + 60, passed=["gpu001", "gpu002"], in_service=["gpu001", "gpu002"]))  # fmt: skip
    drained = {
        n: format_reason("health", "gpu_xid", "Xid 79 on GPU 3") for n in ("gpu001", "gpu002")
    }
    again = after_burnin(replay(log, in_order=True), BurninEvidence(
        "B2", T + 120, frozenset({"gpu001"}), {"gpu002": "gemm below floor"},
        frozenset({"gpu001"}), {"gpu002": "gemm_floor"}, drained))  # fmt: skip
    assert [(e.node, e.to, e.reason) for e in again] == [
        ("gpu001", State.FAILED, "health gpu_xid"),
        ("gpu001", State.QUARANTINED, ""), ("gpu001", State.BURNED_IN, ""),
        ("gpu001", State.IN_SERVICE, ""),
        ("gpu002", State.FAILED, "health gpu_xid"),  # and the burn-in's failure keeps it there
    ]  # fmt: skip
    assert again[0].evidence == "health gpu_xid: Xid 79 on GPU 3"
    assert funnel(replay(log + again, in_order=True)).failure_reasons == (("health gpu_xid", 2),)


def test_a_node_with_no_record_is_caught_up_and_its_inferred_steps_are_not_timed():
    """A cluster brought up before kiln kept a lifecycle: its first burn-in records the steps
    the node must have passed, as inferred, and the funnel times none of them."""
    log = after_burnin({}, burnin("B1", T, passed=["gpu001"], in_service=["gpu001"]))
    assert [(e.to, e.inferred) for e in log] == [
        (State.DECLARED, True), (State.REACHABLE, True), (State.PROVISIONED, True),
        (State.QUARANTINED, True), (State.BURNED_IN, False), (State.IN_SERVICE, False)]  # fmt: skip
    report = funnel(replay(log, in_order=True))
    assert report.per_state[State.IN_SERVICE] == 1
    assert all(step.stays == 0 for step in report.steps[:4])


def test_the_log_reads_back_what_it_wrote_and_refuses_a_newer_schema():
    events = after_run({}, NODES, run("R1", T))
    failed = burnin("B1", T + 60, failed={"gpu001": "nan"}, checks={"gpu001": "gemm_sdc"})
    events += after_burnin(replay(events, in_order=True), failed)
    lines = to_text(events).splitlines()
    assert read_lines(lines, "log") == events
    newer = [*lines, json.dumps({"v": 2, "node": "gpu001", "at": T, "to": "rma"})]
    with pytest.raises(NewerLog) as refused:
        read_lines(newer, "ctl:/var/lib/kiln/state/lifecycle.jsonl")
    assert refused.value.exit_code == ExitCode.ENVIRONMENT
    assert f"lifecycle.jsonl:{len(newer)} was written by a newer kiln" in refused.value.message
    # A line a killed kiln left cut short never took effect; a whole line that is not an event
    # is named.
    assert read_lines([*lines[:3], lines[3][:20], *lines[3:]], "log") == events
    with pytest.raises(InvalidInputError, match="log:2 is not a lifecycle event"):
        read_lines([lines[0], '{"v": 1, "node": "gpu001"}', *lines[1:]], "log")


def test_the_log_on_the_controller_is_appended_under_its_lock_and_survives_a_torn_line(tmp_path):
    log = LifecycleLog(LocalRemote("ctl"), str(tmp_path / "state"))
    assert log.events() == []
    first = after_run({}, NODES, run("R1", T))
    assert log.append(first) == len(first)
    path = tmp_path / "state" / "lifecycle.jsonl"
    with path.open("a") as handle:
        handle.write('{"v": 1, "node": "gpu0')  # an append killed half-way
    assert log.events() == first
    more = after_burnin(log.lives(), burnin("B1", T + 60, passed=["gpu001"]))
    log.append(more)
    assert log.events() == first + more  # the torn line was ended, not joined to the next
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # umask 077, as state.json


def test_run_evidence_reads_the_summary_of_a_provision_run():
    summary = {
        "run_id": "R9",
        "started": "2025-12-01T08:00:00+00:00",
        "finished": "2025-12-01T08:10:00+00:00",
        "hosts": {
            "gpu001": {"base": "ok", "slurm": "changed"},
            "gpu002": {"base": "failed", "slurm": "not_run"},
            "gpu003": {"base": "unreachable", "slurm": "not_run"},
            "slurm-ctl01": {"base": "ok", "slurm": "ok"},
        },
        "quarantined": {"gpu001": "new node"},
    }
    evidence = run_evidence(summary, NODES, at=0.0)
    assert (evidence.run_id, evidence.started, evidence.finished) == ("R9", T, T + 600)
    assert evidence.reached == {"gpu001", "gpu002"} and evidence.joined == {"gpu001"}
    assert evidence.quarantined == {"gpu001": "new node"}


# --- the commands, on a cluster whose shared state is local ----------------------------------


@pytest.fixture
def inventory(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    copy = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, copy)
    with (copy / "group_vars" / "all.yml").open("a", encoding="utf-8") as handle:
        handle.write("\nkiln_state:\n  backend: local\n")
    return copy


class Shown:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.output = code, stdout, stdout + stderr


@pytest.fixture
def kiln(capsys):
    """`kiln ARGS` through the CLI's one error handler: its exit code and output."""
    from kiln.app import main

    def invoke(*args: str) -> Shown:
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        said = capsys.readouterr()
        return Shown(exited.value.code, said.out, said.err)

    return invoke


def _seed(inventory: Path) -> LifecycleLog:
    from kiln.inventory import require_valid
    from kiln.state.lifecycle import local_log

    log = local_log(require_valid(inventory))
    events = after_run({}, NODES, run("R1", T))
    events += after_burnin(replay(events, in_order=True), burnin(
        "B1", T + 86_400, passed=["gpu001", "gpu003"], in_service=["gpu001", "gpu003"],
        failed={"gpu002": "xid 79"}, checks={"gpu002": "xid"}))  # fmt: skip
    log.append(events)
    return log


def test_triage_and_rma_by_command_and_their_refusals_change_nothing(inventory, kiln):
    log = _seed(inventory)
    before = log.events()
    for args, code, said in (
        (["rma", str(inventory), "gpu001", "--note", "x"], 2, "in_service -> rma"),
        (["triage", str(inventory), "gpu999", "--note", "x"], 2, "gpu999 is not a compute node"),
        (["triage", str(inventory), "gpu004", "--note", "x"], 2, "no lifecycle record"),
    ):
        shown = kiln(*args)
        assert shown.exit_code == code, shown.output
        assert said in shown.output
        assert log.events() == before
    shown = kiln("triage", str(inventory), "gpu002", "--note", "xid 79 twice", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["state"] == "triage"
    shown = kiln("rma", str(inventory), "gpu002", "--note", "GPU 3 off the bus")
    assert shown.exit_code == 0, shown.output
    assert log.lives()["gpu002"].state is State.RMA
    assert log.events()[-1].evidence.endswith(": GPU 3 off the bus")
    # A log a newer kiln wrote: exit 3, nothing appended.
    path = Path(log.directory) / "lifecycle.jsonl"
    path.write_text(path.read_text() + '{"v": 7, "node": "gpu003", "at": 1, "to": "x"}\n')
    size = path.stat().st_size
    shown = kiln("triage", str(inventory), "gpu003", "--note", "x")
    assert shown.exit_code == 3 and "newer kiln" in shown.output
    assert path.stat().st_size == size


def test_funnel_prints_the_counts_and_steps_as_json_and_html(inventory, kiln, tmp_path):
    _seed(inventory)
    shown = kiln("funnel", str(inventory), "--json", "--html", str(tmp_path / "f.html"))
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["nodes"] == 3
    assert doc["per_state"]["in_service"] == 2 and doc["per_state"]["failed"] == 1
    assert doc["slowest"] == "quarantined"  # a day in quarantine, minutes elsewhere
    assert doc["failure_reasons"] == [{"reason": "xid", "count": 1}]
    page = (tmp_path / "f.html").read_text()
    assert 'data-name="in_service" data-last="2"' in page
    assert kiln("funnel", str(inventory), "--since", "last week").exit_code == 2
    # One node's history, oldest first, with its evidence.
    shown = kiln("funnel", str(inventory), "--node", "gpu002", "--json")
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["state"] == "failed"
    assert [h["state"] for h in doc["history"]] == [
        "declared", "reachable", "provisioned", "quarantined", "failed"]  # fmt: skip
    assert doc["history"][-1]["evidence"] == "burn-in B1: xid 79"
    shown = kiln("funnel", str(inventory), "--node", "gpu002")
    assert "gpu002: failed" in shown.output and "burn-in B1: xid 79" in shown.output
    assert kiln("funnel", str(inventory), "--node", "gpu099").exit_code == 2
    # A node the inventory dropped keeps its history in the log, not its place in the funnel.
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("gpu003:", "gpx003:"))
    shown = kiln("funnel", str(inventory), "--json")
    assert json.loads(shown.stdout)["nodes"] == 2
    assert "1 node(s) no longer in the inventory left out" in shown.output


def test_status_shows_each_nodes_lifecycle_state_and_says_when_it_cannot(inventory, tmp_path):
    from kiln.commands.status import lifecycle_states
    from kiln.inventory import require_valid

    cluster = require_valid(inventory)
    assert lifecycle_states(cluster) == ({}, None)  # no log yet: nothing to show, no error
    _seed(inventory)
    shown, note = lifecycle_states(cluster)
    assert note is None
    assert shown == {"gpu001": "in_service", "gpu002": "failed", "gpu003": "in_service"}
    log = local_directory(cluster) / "lifecycle.jsonl"
    log.write_text(log.read_text() + '{"v": 2, "node": "gpu001", "at": 1, "to": "rma"}\n')
    assert lifecycle_states(cluster)[1].startswith("lifecycle not shown: ")
