"""topology.conf from ibnetdiscover: golden files for a 2-level (real) and 3-level (derived)
tree, rail-0 placement, and the disagreements with the inventory."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.app import main
from kiln.fabric.topology import build_topology, render_topology_conf, topology_from_text
from kiln.fleet import CommandOutcome, ExecResult, NodeResult
from kiln.inventory import require_valid
from kiln.parsers.ibnetdiscover import parse_ibnetdiscover

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = shared_capture("ibnetdiscover/dgx_h100_superpod_ndr_mqm9701_truncated.txt")
DEGRADED = FIXTURES / "derived/ibnetdiscover/dgx_h100_superpod_one_link_hdr.txt"
FABRIC = FIXTURES / "fabric"
THREE = FABRIC / "three_level_fat_tree.ibnetdiscover"
INVENTORY = FABRIC / "inventory-3level"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def test_two_level_golden_from_the_real_superpod_fabric():
    topology = build_topology(parse_ibnetdiscover(REAL.read_text()))
    text = render_topology_conf(topology, "superpod", REAL.name)
    assert text == (FABRIC / "golden/topology-2level-superpod.conf").read_text()
    assert topology.levels == 2
    leaf = next(s for s in topology.leaves() if s.name == "A09-P1-IBLEAF-04-04")
    assert leaf.nodes == tuple(f"a08-p1-dgx-04-c{i:02d}" for i in range(1, 18))
    # CAs still showing "MT4129 ConnectX7 Mellanox Technologies" have no host name
    assert "e09d730300858d88" in topology.unnamed_cas


def test_three_level_golden_through_the_cli(tmp_path, capsys):
    out = tmp_path / "topology.conf"
    argv = ["fabric", "topology", str(INVENTORY), "--from", str(THREE), "--output", str(out)]
    code, stdout, stderr = run(argv, capsys)
    assert code == 0 and stdout == ""
    assert out.read_text() == (FABRIC / "golden/topology-3level.conf").read_text()
    # gpu017 is not in the fabric: it goes under a leaf kiln adds, joined at a top kiln adds
    assert "4 levels, 5 leaves, 16 inventory hosts placed" in stderr
    assert "kiln added kiln-not-in-fabric (gpu017)" in stderr
    assert "kiln added kiln-top (CORE-01, CORE-02, kiln-not-in-fabric)" in stderr


def test_each_host_sits_under_the_leaf_of_its_rail0_hca():
    fabric = parse_ibnetdiscover(THREE.read_text())
    default = build_topology(fabric)
    assert default.hosts["gpu001"] == "P1-SU1-IBLEAF-R0"
    # A node whose rail 0 is mlx5_1 goes under the R1 leaf; the R0 leaf keeps the others.
    moved = build_topology(fabric, rail0={"gpu001": "mlx5_1"})
    assert moved.hosts["gpu001"] == "P1-SU1-IBLEAF-R1"
    names = {s.name: s for s in moved.switches}
    assert names["P1-SU1-IBLEAF-R1"].nodes == ("gpu001",)
    assert names["P1-SU1-IBLEAF-R0"].nodes == ("gpu002", "gpu003", "gpu004")
    assert "P1-SU1-IBLEAF-R1" in names["P1-IBSPINE-01"].switches


def test_hosts_outside_the_inventory_stay_out_of_topology_conf():
    fabric = parse_ibnetdiscover(THREE.read_text())
    topology = build_topology(fabric, only_hosts={"gpu001", "gpu002"})
    assert [s.name for s in topology.leaves()] == ["P1-SU1-IBLEAF-R0"]
    # switches left without children are dropped at every level
    assert {s.name for s in topology.switches if s.level == 1} == {"P1-IBSPINE-01", "P1-IBSPINE-02"}
    assert [s.switches for s in topology.switches if s.level == 2] == [
        ("P1-IBSPINE-01", "P1-IBSPINE-02"),
        ("P1-IBSPINE-01", "P1-IBSPINE-02"),
    ]


def test_disagreements_with_the_inventory_are_named():
    result = topology_from_text(require_valid(INVENTORY), THREE.read_text(), THREE.name)
    found = {(d.kind, d.subject): d.message for d in result.disagreements}
    assert set(found) == {
        ("missing-from-fabric", "gpu017"),
        ("leaf-split", "leaf-r03"),
        ("leaf-mixed", "P1-SU2-IBLEAF-R0"),
    }
    assert "P1-SU2-IBLEAF-R0: gpu008" in found["leaf-split", "leaf-r03"]
    assert "leaf-r03 (rack r03): gpu008" in found["leaf-mixed", "P1-SU2-IBLEAF-R0"]
    assert result.degraded_links == []


def test_strict_json_and_a_leaf_named_in_the_inventory(tmp_path, capsys):
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        (INVENTORY / "hosts.yml")
        .read_text()
        .replace(
            "gpu[001:004]:",
            "gpu[001:003]:\n            gpu004: {kiln_leaf_switch: P2-SU1-IBLEAF-R0}",
        )
    )
    (inventory / "group_vars/all.yml").write_text((INVENTORY / "group_vars/all.yml").read_text())
    argv = ["fabric", "topology", str(inventory), "--from", str(THREE), "--json", "--strict"]
    code, stdout, _ = run(argv, capsys)
    assert code == 1
    document = json.loads(stdout)
    assert document["kiln"] == "fabric topology" and document["levels"] == 4
    assert document["not_in_fabric"] == ["gpu017"] and document["skipped_lines"] == []
    differs = [d for d in document["disagreements"] if d["kind"] == "leaf-differs"]
    assert differs == [{
        "kind": "leaf-differs", "subject": "gpu004",
        "message": "gpu004: the inventory says leaf P2-SU1-IBLEAF-R0 (rack r01), "
                   "the fabric has it on P1-SU1-IBLEAF-R0",
    }]  # fmt: skip


def test_a_degraded_link_is_reported():
    inventory = require_valid(INVENTORY)
    result = topology_from_text(inventory, DEGRADED.read_text(), DEGRADED.name)
    assert result.degraded_links == [
        "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1 port 3 <-> a08-p1-dgx-04-c03 mlx5_5 port 1: "
        "4xHDR, expected 4xNDR"
    ]


def test_without_from_ibnetdiscover_runs_on_the_first_opensm_host(monkeypatch, capsys):
    calls = []

    def fake_run_command(nodes, command, **kwargs):
        calls.append(([n.name for n in nodes], command, kwargs))
        result = NodeResult(
            nodes[0].name, nodes[0].address, CommandOutcome.OK, 0, THREE.read_text()
        )
        return ExecResult(command, [result], 0.1, 1, 300.0)

    monkeypatch.setattr("kiln.fleet.run_command", fake_run_command)
    code, stdout, stderr = run(["fabric", "topology", str(INVENTORY)], capsys)
    assert code == 0
    assert calls == [(["gpu001"], "ibnetdiscover", {"fanout": 1, "timeout": 300.0})]
    assert stdout == (FABRIC / "golden/topology-3level.conf").read_text().replace(
        "(three_level_fat_tree.ibnetdiscover)", "(ibnetdiscover on gpu001)"
    )
    assert "running ibnetdiscover on gpu001" in stderr


def test_a_failed_gather_says_where_and_why(monkeypatch, capsys):
    def fake_run_command(nodes, command, **kwargs):
        failed = NodeResult(nodes[0].name, nodes[0].address, CommandOutcome.FAILED, 255, "",
                            "ibwarn: mad_rpc_open_port: can't open UMAD port")  # fmt: skip
        return ExecResult(command, [failed], 0.1, 1, 300.0)

    monkeypatch.setattr("kiln.fleet.run_command", fake_run_command)
    code, _, stderr = run(["fabric", "topology", str(INVENTORY), "--node", "gpu005"], capsys)
    assert code == 1
    assert "ibnetdiscover on gpu005 failed (failed)" in stderr
    assert "can't open UMAD port" in stderr


# --- Two switches that both carry hosts, cabled to each other without a spine (issue 16) -----

LINKED = (
    FIXTURES / "real/ibnetdiscover/switchib_sx6012_edr_fdr_linked_switches_query_smp_timeout.txt"
)


def reaches(topology, switch_name: str) -> set[str]:
    """The hosts a switch reaches through its descendants, as Slurm's tree plugin counts them."""
    by_name = {s.name: s for s in topology.switches}
    switch = by_name[switch_name]
    found = set(switch.nodes)
    for child in switch.switches:
        found |= reaches(topology, child)
    return found


def test_two_leaves_cabled_to_each_other_share_an_ancestor():
    # Real capture: a SwitchIB (r-ufm111, r-ufm216) and an SX6012 (r-ufm96/100/101) cabled
    # port 3 <-> port 1, no spine. Slurm must find one switch that reaches every host, or it
    # never places a job across the two.
    text = LINKED.read_text().split("\n", 1)[1]  # without the diagnostic line (tested apart)
    topology = build_topology(parse_ibnetdiscover(text))
    hosts = set(topology.hosts)
    assert hosts == {"r-ufm96", "r-ufm100", "r-ufm101", "r-ufm111", "r-ufm216"}
    assert any(reaches(topology, s.name) == hosts for s in topology.switches)


def test_a_given_capture_with_nothing_usable_exits_2(tmp_path, capsys, monkeypatch):
    failed = FIXTURES / "real/ibnetdiscover/failed_cannot_open_mad_port.txt"
    code, stdout, stderr = run(
        ["fabric", "topology", str(INVENTORY), "--from", str(failed)], capsys
    )
    assert (code, stdout) == (2, "")
    assert "no switch or CA found" in stderr and "discover failed" in stderr
    monkeypatch.setattr("sys.stdin", io.StringIO(failed.read_text()))
    code, _, _ = run(["fabric", "topology", str(INVENTORY), "--from", "-"], capsys)
    assert code == 2
    missing = tmp_path / "absent.txt"
    code, _, stderr = run(["fabric", "topology", str(INVENTORY), "--from", str(missing)], capsys)
    assert code == 2 and "cannot read" in stderr


def test_skipped_lines_and_added_switches_are_shown(capsys):
    argv = ["fabric", "topology", str(INVENTORY), "--from", str(LINKED), "--json"]
    code, stdout, stderr = run(argv, capsys)
    assert code == 0
    assert f"skipped: {LINKED.name} line 1 skipped (diagnostic): 'src/query_smp.c:195;" in stderr
    document = json.loads(stdout)
    assert [(s["line"], s["reason"]) for s in document["skipped_lines"]] == [(1, "diagnostic")]
    added = [s for s in document["switches"] if s["added_by_kiln"]]
    # None of this inventory's hosts is in that fabric: no switch holds one, nothing is added.
    assert added == [] and document["switches"] == []


def _declared_by_guid(tmp_path, hosts: str) -> Path:
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(hosts)
    (inventory / "group_vars/all.yml").write_text("---\nkiln_cluster_name: pod\n")
    return inventory


def test_a_host_declared_by_hca_guid_is_placed_though_its_ca_keeps_the_default_description(
    tmp_path,
):
    """The real SuperPOD capture: leaf A09-P1-IBLEAF-04-02 port 6 is a CA still named "MT4129
    ConnectX7   Mellanox Technologies" (no host in the description). Declared by its node GUID,
    the host goes under that leaf; declared by name only, it could never be found."""
    fabric = parse_ibnetdiscover(REAL.read_text())
    guids = {"e09d730300858d88": ("a06-p1-dgx-02-c05", "0xe09d730300858d88")}
    topology = build_topology(fabric, guids=guids)
    assert topology.hosts["a06-p1-dgx-02-c05"] == "A09-P1-IBLEAF-04-02"
    assert "e09d730300858d88" not in topology.unnamed_cas
    hosts = (
        "all:\n  children:\n    kiln_controllers:\n      hosts:\n        ctl01:\n"
        "    kiln_compute:\n      vars: {kiln_gpu_model: h100-sxm}\n      hosts:\n"
        "        a06-p1-dgx-02-c05: {kiln_ib_hcas: ['0xE09D730300858D88']}\n"
    )
    cluster = require_valid(_declared_by_guid(tmp_path, hosts))
    result = topology_from_text(cluster, REAL.read_text(), REAL.name)
    assert result.topology.hosts == {"a06-p1-dgx-02-c05": "A09-P1-IBLEAF-04-02"}
    assert not [d for d in result.disagreements if d.subject == "a06-p1-dgx-02-c05"]
    assert "e09d730300858d88" not in result.unnamed_cas


def test_a_host_declared_by_a_port_guid_is_matched_too():
    """The man page's capture: CA 0008f10403960558 ("MT23108 InfiniHost Mellanox
    Technologies") on ISR9024 ports 8 and 12; ibstat shows its port GUIDs (...0559, ...055a),
    which an operator may copy into the inventory instead of the node GUID."""
    fabric = parse_ibnetdiscover(
        (
            FIXTURES / "real/ibnetdiscover/voltaire_isr9024_sw6ib4_sdr_manpage_grouping.txt"
        ).read_text()
    )
    topology = build_topology(fabric, guids={"0008f10403960559": ("node7", "0x8f10403960559")})
    assert topology.hosts == {"node7": "switch-005442ba00003080"}  # the ISR9024
    assert "0008f10403960558" not in topology.unnamed_cas
