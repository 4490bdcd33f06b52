"""ibnetdiscover against a recorded real DGX H100 SuperPOD fabric (truncated to 7 leaf blocks)."""

from pathlib import Path

import pytest

from kiln.parsers import ParseError
from kiln.parsers.ibnetdiscover import parse_ibnetdiscover

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = FIXTURES / "real/ibnetdiscover/dgx_h100_superpod_ndr_mqm9701_truncated.txt"
DEGRADED = FIXTURES / "derived/ibnetdiscover/dgx_h100_superpod_one_link_hdr.txt"

LEAF_04_04 = "2c5eab0300b87b40"
SPINE_02 = "2c5eab0300c26280"


def test_nodes_and_links() -> None:
    fabric = parse_ibnetdiscover(REAL.read_text())
    assert len(fabric.switches()) == 16  # 7 listed leaves + 9 spines seen as peers
    assert len([s for s in fabric.switches() if s.listed]) == 7
    assert len(fabric.cas()) == 128
    assert len(fabric.links) == 245
    leaf = fabric.nodes[LEAF_04_04]
    assert leaf.kind == "switch"
    assert leaf.description == "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
    assert leaf.short_name == "A09-P1-IBLEAF-04-04"
    assert (leaf.lid, leaf.port_count, leaf.devid) == (73, 65, "0xd2f2")
    host = fabric.nodes["e09d7303007a4bd8"]
    assert host.kind == "ca"
    assert host.description == "a08-p1-dgx-04-c01 mlx5_5"
    assert host.hostname == "a08-p1-dgx-04-c01"
    assert host.lid == 647
    assert fabric.nodes["e09d730300858d88"].hostname is None  # default "MT4129 ConnectX7 ..."
    # port-to-port: leaf port 35 -> spine 02 port 32, 4x NDR
    link = next(lk for lk in fabric.links_of(SPINE_02) if lk.a_guid == LEAF_04_04)
    assert (link.a_port, link.b_port, link.width, link.speed) == (35, 32, "4x", "NDR")


def test_leaf_and_spine_classification() -> None:
    fabric = parse_ibnetdiscover(REAL.read_text())
    leaves = sorted(s.short_name for s in fabric.leaf_switches())
    assert leaves == [
        "A09-P1-IBLEAF-01-02", "A09-P1-IBLEAF-04-02", "A09-P1-IBLEAF-04-04",
        "B09-P1-IBLEAF-01-08", "B09-P1-IBLEAF-02-08", "B09-P1-IBLEAF-03-08",
        "B09-P1-IBLEAF-04-08",
    ]  # fmt: skip
    spines = sorted(s.short_name for s in fabric.spine_switches())
    assert spines == [f"A10-P1-IBSPINE-0{i}" for i in range(1, 5)] + [
        f"B10-P1-IBSPINE-0{i}" for i in range(5, 10)
    ]
    levels = fabric.switch_levels()
    assert levels[LEAF_04_04] == 0 and levels[SPINE_02] == 1
    # SHARP aggregation node on port 65 is in the graph but is not a host
    hosts = fabric.hosts_on(LEAF_04_04)
    assert len(hosts) == 17
    assert hosts[0].hostname == "a08-p1-dgx-04-c01"
    assert not any(h.is_aggregation_node for h in hosts)
    assert any(n.is_aggregation_node for n in fabric.neighbors(LEAF_04_04))
    # leaf 04-02 has no cable on ports 5 and 15 (down links)
    used = {lk.a_port for lk in fabric.links_of("2c5eab0300b87bc0")}
    assert {5, 15}.isdisjoint(used) and {4, 6, 14, 16}.issubset(used)


def test_all_links_ndr_in_real_and_one_degraded_in_derived() -> None:
    assert parse_ibnetdiscover(REAL.read_text()).degraded_links("4x", "NDR") == []
    bad = parse_ibnetdiscover(DEGRADED.read_text()).degraded_links("4x", "NDR")
    assert len(bad) == 1
    assert (bad[0].a_guid, bad[0].a_port, bad[0].speed) == (LEAF_04_04, 3, "HDR")


def test_malformed_line_is_named() -> None:
    lines = REAL.read_text().splitlines()
    lines[14] = "[5]\tgarbage"
    with pytest.raises(ParseError) as info:
        parse_ibnetdiscover("\n".join(lines))
    assert info.value.tool == "ibnetdiscover"
    assert info.value.line_no == 15


def test_empty_output() -> None:
    with pytest.raises(ParseError, match="no switch or CA"):
        parse_ibnetdiscover("#\n# Topology file: generated on ...\n")
