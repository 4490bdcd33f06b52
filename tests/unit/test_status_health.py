"""`kiln status --health` (issue 19): the last health result per compute node, read over SSH
through the fleet fan-out only when asked; plain `kiln status` contacts no compute node.

Slurm's side is the recorded `scontrol show node` of tests/fixtures/real/slurm-sinfo-scontrol;
the nodes' answers are what `cat /var/lib/kiln/health/last.json` gives: a document written by
kiln.health.node.check (healthy, failing), nothing (no periodic run yet), or no answer.
"""

from __future__ import annotations

import json

import pytest

from captures import shared_capture
from kiln.app import main
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.health.results import LAST, last_cell
from kiln.parsers.slurm import parse_scontrol_nodes
from kiln.slurmctl.state import from_scontrol
from kiln.slurmctl.status import merge
from slurm_inventory import slurm_cluster

SCONTROL = shared_capture(
    "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
)


def _document(node: str, findings: list[tuple[str, bool, str]]) -> str:
    document = {
        "kind": "kiln-health", "version": 1, "node": node, "time": "2026-12-01T10:00:00Z",
        "subset": "all", "duration_s": 0.4, "ok": all(ok for _, ok, _ in findings),
        "findings": [{"check": c, "ok": ok, "reading": r} for c, ok, r in findings],
        "action": {"verb": "none", "reason": "", "why": ""},
    }  # fmt: skip
    return json.dumps(document, indent=1) + "\n"  # last.json is indented


ANSWERS = {
    "cortex-01": NodeResult(
        "cortex-01",
        "10.0.0.11",
        CommandOutcome.FAILED,
        1,
        _document(
            "cortex-01",
            [
                ("gpu_count", False, "7 GPUs, expected 8"),
                ("nvlink", False, "GPU 3 link 2 inactive"),
                ("munge", True, "active"),
            ],
        ),
    ),  # fmt: skip
    "oxygen-04": NodeResult(
        "oxygen-04",
        "10.0.0.12",
        CommandOutcome.OK,
        0,
        _document("oxygen-04", [("munge", True, "active")]),
    ),  # fmt: skip
    "cricket": NodeResult(
        "cricket",
        "10.0.0.13",
        CommandOutcome.FAILED,
        1,
        "",
        f"cat: {LAST}: No such file or directory",
    ),  # fmt: skip
    "gpu-new": NodeResult(
        "gpu-new",
        "10.0.0.14",
        CommandOutcome.UNREACHABLE,
        None,
        "",
        "",
        error="Connection timed out",
    ),  # fmt: skip
}


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """Slurm from the recorded scontrol output; each node's answer from ANSWERS."""
    cluster = slurm_cluster(tmp_path / "inventory")
    nodes = {n.name: from_scontrol(n) for n in parse_scontrol_nodes(SCONTROL.read_text())}
    monkeypatch.setattr("kiln.commands.status.cluster_status", lambda c: merge(c, nodes, "ctl"))
    calls = []

    def run_command(selected, command, **kwargs):
        calls.append(([n.name for n in selected], command, kwargs))
        results = [ANSWERS[n.name] for n in selected]
        return ExecResult(command, results, 0.2, kwargs["fanout"], kwargs["timeout"])

    monkeypatch.setattr("kiln.fleet.run_command", run_command)
    return cluster, calls


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def test_plain_status_contacts_no_compute_node(stand_ins, capsys):
    cluster, calls = stand_ins
    code, out, _ = run_cli(["status", str(cluster.inventory_dir)], capsys)
    assert code == 0 and calls == []
    assert "last health" not in out
    code, out, _ = run_cli(["status", str(cluster.inventory_dir), "--json"], capsys)
    assert all("health" not in node for node in json.loads(out)["nodes"])


def test_status_health_reads_last_json_once_per_compute_node(stand_ins, capsys, monkeypatch):
    cluster, calls = stand_ins
    monkeypatch.setattr("kiln.fleet.ssh.getpass.getuser", lambda: "ops")  # no ansible_user: sudo
    argv = ["status", str(cluster.inventory_dir), "--health", "--json", "-f", "8", "-t", "5"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0  # health is shown, not judged: status still says what Slurm answered
    assert len(calls) == 1
    names, command, kwargs = calls[0]
    assert sorted(names) == sorted(ANSWERS) and kwargs == {"fanout": 8, "timeout": 5.0}
    assert f"cat {LAST}" in command and "sudo -n" in command
    health = {node["name"]: node.get("health") for node in json.loads(out)["nodes"]}
    assert health["cortex-01"] == {
        "ok": False, "time": "2026-12-01T10:00:00Z",
        "text": "FAIL gpu_count: 7 GPUs, expected 8 (+1 more) at 2026-12-01T10:00:00Z",
    }  # fmt: skip
    assert health["oxygen-04"]["ok"] is True
    assert health["cricket"] == {"ok": None, "time": None, "text": "no result yet"}
    assert health["gpu-new"] == {"ok": None, "time": None, "text": "not read (unreachable)"}
    assert health["dumfries-002"] is None  # in Slurm, not in the inventory: not asked
    assert "1 node(s) unhealthy at their last check: cortex-01" in err
    assert "2 node(s) without a last health result: cricket,gpu-new" in err


def test_status_health_table_has_the_column(stand_ins, capsys):
    cluster, _ = stand_ins
    code, out, _ = run_cli(["status", str(cluster.inventory_dir), "--health"], capsys)
    assert code == 0
    assert "last health" in out and "FAIL gpu_count" in out and "no result yet" in out


def test_last_cell_from_a_real_node_document(tmp_path):
    """The document kiln.health.node.check itself writes (report mode, no probes wanted)."""
    from kiln.health import node

    expect = {"node": {"name": "n1"}, "skip": list(node.checks.CHECKS)}
    document = node.check(expect, tmp_path, report=True)  # report: never calls scontrol
    cell = last_cell("ok", json.dumps(document, indent=1))
    assert cell["ok"] is True and cell["text"] == f"healthy at {document['time']}"
    assert last_cell("failed", "", "sudo: a password is required") == {
        "ok": None, "time": None, "text": "not read: sudo: a password is required",
    }  # fmt: skip
    assert last_cell("timeout", "") == {"ok": None, "time": None, "text": "not read (timeout)"}


def test_a_check_that_could_not_run_is_said_and_not_counted_unhealthy():
    """Issue 27: a finding with ok null (the probe could not check) leaves the node healthy."""
    unchecked = ("time_sync", None, "probe time_sync could not check: timedatectl exit 1")
    document = json.loads(_document("n1", [("munge", True, "active"), unchecked]))
    document["ok"] = True  # what kiln.health.node writes: no check failed
    cell = last_cell("ok", json.dumps(document))
    assert cell == {
        "ok": True, "time": "2026-12-01T10:00:00Z",
        "text": "healthy (could not check time_sync) at 2026-12-01T10:00:00Z",
    }  # fmt: skip
    failing = json.loads(_document("n1", [("mount", False, "mount /x missing"), unchecked]))
    assert last_cell("failed", json.dumps(failing))["text"] == (
        "FAIL mount: mount /x missing at 2026-12-01T10:00:00Z"  # the unchecked one is no "+1 more"
    )
