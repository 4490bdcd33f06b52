"""`kiln status` merging: the inventory beside Slurm's nodes and the last burn-in verdicts.

Slurm's side is the recorded `scontrol show node` of tests/fixtures/real/slurm-sinfo-scontrol
(Slurm 17.11: cortex-01 8x m60 allocated, dumfries-002, oxygen-04 drained by root, cricket).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.judging import BurninReport
from kiln.judging.verdicts import Action, Severity, Verdict
from kiln.parsers.slurm import parse_scontrol_nodes
from kiln.records.burnin import save_report
from kiln.records.burnin_verdicts import last_verdicts
from kiln.slurmctl.state import from_scontrol
from kiln.slurmctl.status import NOT_IN_INVENTORY, NOT_IN_SLURM, cluster_status, merge
from slurm_inventory import slurm_cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "slurm-sinfo-scontrol"
SCONTROL = shared_capture(
    "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
)


@pytest.fixture
def cluster(tmp_path: Path):
    return slurm_cluster(tmp_path / "inventory")


@pytest.fixture
def slurm_nodes():
    return {n.name: from_scontrol(n) for n in parse_scontrol_nodes(SCONTROL.read_text())}


def save(state: Path, run_id: str, nodes: dict[str, str], failing: dict[str, str]) -> None:
    verdicts = [
        Verdict("node", node, "gemm_floor", node not in failing, severity=Severity.WARNING,
                action=Action.DRAIN if node in failing else Action.NONE,
                message=failing.get(node, ""), node=node)
        for node in nodes
    ]  # fmt: skip
    report = BurninReport("kiln", run_id, "quick", node_profiles=nodes, verdicts=verdicts)
    (state / "runs" / run_id).mkdir(parents=True)
    save_report(state / "runs" / run_id, report)


def test_merge_flags_both_sides_and_keeps_drain_details(cluster, slurm_nodes):
    status = merge(cluster, slurm_nodes, "ctl")
    rows = {row.name: row for row in status.rows}
    assert [row.name for row in status.rows] == [
        "cortex-01", "oxygen-04", "cricket", "gpu-new", "dumfries-002",
    ]  # fmt: skip
    assert "ctl" not in rows  # a controller is not expected in Slurm
    assert rows["gpu-new"].flag == NOT_IN_SLURM and rows["gpu-new"].state == "not in slurm"
    assert rows["dumfries-002"].flag == NOT_IN_INVENTORY and not rows["dumfries-002"].in_inventory
    oxygen = rows["oxygen-04"].slurm
    assert oxygen.drained and oxygen.drained_by == "root"
    assert oxygen.reason_time == "2019-01-29T10:42:12" and oxygen.reason == "memory issues?"
    assert rows["cortex-01"].slurm.gpus == 8 and rows["cortex-01"].declared_gpus == 8
    assert rows["cricket"].slurm.gpus == 1
    doc = status.to_dict()
    assert doc["counts"] == {"allocated": 2, "idle": 1, "idle+drain": 1, "not in slurm": 1}
    assert doc["flagged"] == {"gpu-new": NOT_IN_SLURM, "dumfries-002": NOT_IN_INVENTORY}
    assert doc["by_state"]["allocated"] == "cortex-01,dumfries-002"
    json.dumps(doc)  # serialisable as is


def test_burnin_verdicts_newest_report_wins_unknown_otherwise(tmp_path, cluster):
    state = tmp_path / "state"
    save(state, "r1", {"cortex-01": "a100-sxm-80g", "cricket": "none"}, {"cricket": "old"})
    save(state, "r2", {"cortex-01": "a100-sxm-80g"}, {"cortex-01": "gemm gpu3 300 < floor 400"})
    # another cluster's report is not evidence about this one
    other = BurninReport("elsewhere", "r3", node_profiles={"oxygen-04": "none"})
    (state / "runs" / "r3").mkdir()
    save_report(state / "runs" / "r3", other)
    verdicts = last_verdicts("kiln", ["cortex-01", "cricket", "oxygen-04"], state)
    assert verdicts["cortex-01"].verdict == "failed" and verdicts["cortex-01"].run_id == "r2"
    assert verdicts["cortex-01"].reason == "kiln: gemm gpu3 300 < floor 400"
    assert verdicts["cricket"].verdict == "failed"  # only r1 judged it
    assert verdicts["oxygen-04"].text() == "unknown"


def test_cluster_status_reads_sinfo_on_the_controller(tmp_path, cluster):
    # derived: the fixture's nodes in kiln's sinfo format (aggregated hostlist lines)
    sinfo = (
        "cortex-01,dumfries-002|allocated|gpu:m60:8|Unknown|Unknown|none\n"
        "oxygen-04|drained|(null)|root|2019-01-29T10:42:12|memory issues?\n"
        "cricket|idle|gpu:quadro:1(S:0),vmem:2G|Unknown|Unknown|none\n"
    )
    seen = []
    reservation = FIXTURES / "scontrol_show_reservation_oneliner_kiln_sandbox_slurm2205.txt"
    jobs = "17|kiln-burnin-20261201t174500z-0a1b2c\n18|(null)\n"

    def runner(nodes, command, *, fanout, timeout):
        seen.append((nodes[0].name, command))
        out = "".join(
            f"@@kiln-step {k}\n{text}@@kiln-step-rc 0\n"
            for k, text in enumerate([sinfo, reservation.read_text(), jobs])
        )
        return ExecResult(
            command, [NodeResult("ctl", "10.0.0.1", CommandOutcome.OK, 0, out)], 0.1, 1, 60
        )

    save(tmp_path / "state", "r1", {"cricket": "none"}, {})
    status = cluster_status(cluster, runner=runner, state=tmp_path / "state")
    assert len(seen) == 1 and seen[0][1].startswith("echo '@@kiln-step 0'; sinfo --noheader "
                                                    "--format '%N|%T|%G|%u|%H|%E';")  # fmt: skip
    # a burn-in killed mid-run left its reservation and one job: one SSH exec reads it too
    assert status.to_dict()["unfinished_burnins"] == [{
        "reservation": "kiln-burnin-20261201t174500z-0a1b2c", "nodes": "kiln-node[01-02]",
        "end": "2026-12-01T18:13:05", "jobs": ["17"],
    }]  # fmt: skip
    rows = {row.name: row for row in status.rows}
    assert (
        rows["cricket"].burnin.verdict == "passed" and rows["cortex-01"].burnin.verdict == "unknown"
    )
    assert status.to_dict()["counts"] == {
        "allocated": 2,
        "drained": 1,
        "idle": 1,
        "not in slurm": 1,
    }
