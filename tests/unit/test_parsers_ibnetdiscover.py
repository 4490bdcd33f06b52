"""ibnetdiscover against a recorded real DGX H100 SuperPOD fabric (truncated to 7 leaf blocks)."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.ibnetdiscover import parse_ibnetdiscover

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = shared_capture("ibnetdiscover/dgx_h100_superpod_ndr_mqm9701_truncated.txt")
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


# --- Readers tolerate what real tools print (issue 16) ---------------------------------------

LINKED = (
    FIXTURES / "real/ibnetdiscover/switchib_sx6012_edr_fdr_linked_switches_query_smp_timeout.txt"
)


def test_a_diagnostic_line_in_a_real_capture_is_skipped_and_named():
    # ibnetdiscover's stderr captured with its stdout: line 1 is libibmad's timeout report.
    fabric = parse_ibnetdiscover(LINKED.read_text())
    (skipped,) = fabric.skipped
    assert skipped.line_no == 1 and skipped.reason == "diagnostic"
    assert "bad status 110; Connection timed out" in skipped.line
    assert len(fabric.switches()) == 2 and len(fabric.cas()) == 6


REAL_DIR = FIXTURES / "real/ibnetdiscover"
FOLDED = FIXTURES / "derived/ibnetdiscover/dgx_h100_superpod_stderr_folded_in.txt"


def test_stderr_folded_in_anywhere_leaves_the_fabric_as_it_is():
    # Three real libibmad timeouts: two before the output, one inside the first leaf's block.
    fabric = parse_ibnetdiscover(FOLDED.read_text())
    clean = parse_ibnetdiscover(REAL.read_text())
    assert [(s.line_no, s.reason) for s in fabric.skipped] == [
        (1, "diagnostic"), (2, "diagnostic"), (15, "diagnostic"),
    ]  # fmt: skip
    assert "0,1,10,19 Attr 0x11:0) bad status 110" in fabric.skipped[2].line
    assert fabric.skipped[2].describe().startswith("line 15 skipped (diagnostic): 'src/query_smp")
    assert len(fabric.links) == len(clean.links) == 245
    assert {n.guid: n.description for n in fabric.nodes.values()} == {
        n.guid: n.description for n in clean.nodes.values()
    }


def test_a_capture_with_nothing_usable_names_the_line_that_says_why():
    # Real: all ibnetdiscover printed on a RoCE node (treydock/infiniband_exporter#26).
    text = (REAL_DIR / "failed_cannot_open_mad_port.txt").read_text()
    with pytest.raises(ParseError, match="no switch or CA found; 3 line") as info:
        parse_ibnetdiscover(text)
    assert info.value.line_no == 3
    assert info.value.line == "ibnetdiscover: iberror: failed: discover failed"


def test_text_that_is_not_the_tools_is_skipped_but_a_damaged_line_of_its_own_is_an_error():
    lines = REAL.read_text().splitlines()
    prompted = "\n".join(["[root@a08-p1-dgx-04-c01 ~]# ibnetdiscover", *lines])
    (prompt,) = parse_ibnetdiscover(prompted).skipped
    assert (prompt.line_no, prompt.reason) == (1, "not ibnetdiscover output")
    cut = "\n".join([*lines[:12], '[3]\t"H-e09d730300858270"[1](e09d7303008'])  # cut mid-line
    with pytest.raises(ParseError, match="unrecognised line at line 13"):
        parse_ibnetdiscover(cut)


def test_two_switches_carrying_hosts_and_cabled_to_each_other():
    fabric = parse_ibnetdiscover(LINKED.read_text())
    names = {s.short_name: s for s in fabric.switches()}
    assert set(names) == {"switch-de779e", "switch-e41d2d030003e470"}
    assert fabric.switch_levels() == {s.guid: 0 for s in names.values()}  # both are leaves
    sx6012, switchib = names["switch-de779e"], names["switch-e41d2d030003e470"]
    assert sorted(h.hostname for h in fabric.hosts_on(sx6012.guid)) == [
        "r-ufm100", "r-ufm101", "r-ufm101", "r-ufm96",
    ]  # fmt: skip
    assert sorted(h.hostname for h in fabric.hosts_on(switchib.guid)) == ["r-ufm111", "r-ufm216"]
    (uplink,) = [
        lk for lk in fabric.links_of(sx6012.guid) if lk.other(sx6012.guid)[0] == switchib.guid
    ]
    assert (uplink.width, uplink.speed) == ("4x", "FDR")
    loops = [lk for lk in fabric.links if lk.a_guid == lk.b_guid]
    assert sorted((lk.a_port, lk.b_port) for lk in loops) == [(1, 2), (19, 21), (29, 30)]
    assert len(fabric.degraded_links("4x", "EDR")) == 6  # 3 FDR, 2 QDR and 1 SDR link


def test_an_old_release_without_link_rates_and_the_grouping_header():
    # 2009: `# "node24 HCA-1" lid 18`, no width or speed; such links are not judged by rate.
    old = parse_ibnetdiscover(
        (REAL_DIR / "infiniscale3_24_nodes_openmpi_users_2009.txt").read_text()
    )
    (switch,) = old.switches()
    assert switch.description == "MT47396 Infiniscale-III Mellanox Technologies"
    assert sorted(h.hostname for h in old.hosts_on(switch.guid)) == sorted(
        f"node{i}" for i in range(1, 25)
    )
    assert {(lk.width, lk.speed) for lk in old.links} == {(None, None)}
    assert old.degraded_links("4x", "QDR") == [] and old.skipped == []
    # 2007 man page, run with -g: "Non-Chassis Nodes" is read past; default CA descriptions
    # ("MT23108 InfiniHost Mellanox Technologies") name no host.
    grouped = parse_ibnetdiscover(
        (REAL_DIR / "voltaire_isr9024_sw6ib4_sdr_manpage_grouping.txt").read_text()
    )
    assert grouped.skipped == [] and len(grouped.switches()) == 2 and len(grouped.cas()) == 4
    assert all(ca.hostname is None for ca in grouped.cas())


@pytest.mark.parametrize(
    ("name", "switches", "hosts"),
    [
        ("mt43132_sdr_two_hosts_ibm.txt", 1, ["compute-00-00", "compute-00-01"]),
        ("sun_dcs36_qdr_one_host_oracle.txt", 1, ["nsn33-43"]),  # a line of one space inside
        ("dgx_gb200_one_ca_no_link.txt", 0, ["dgx-gb200-n01-c1"]),  # port down: no switch
    ],
)
def test_small_real_fabrics(name, switches, hosts):
    fabric = parse_ibnetdiscover((REAL_DIR / name).read_text())
    assert len(fabric.switches()) == switches and fabric.skipped == []
    assert sorted(ca.hostname for ca in fabric.cas()) == hosts


def test_port_guids_are_kept_for_matching_hosts_declared_by_guid() -> None:
    """The man page's capture: InfiniHost CAs keep their default description ("MT23108
    InfiniHost Mellanox Technologies"), so only a GUID can tell whose they are; their port
    GUIDs differ from the node GUID (node ...0558, ports ...0559 and ...055a)."""
    text = (REAL_DIR / "voltaire_isr9024_sw6ib4_sdr_manpage_grouping.txt").read_text()
    ca = parse_ibnetdiscover(text).nodes["0008f10403960558"]
    assert ca.hostname is None
    assert ca.port_guids == {"0008f10403960559", "0008f1040396055a"}
    # a switch port's GUID, printed after its switchguid, is the switch's own
    superpod = parse_ibnetdiscover(REAL.read_text())
    assert superpod.nodes["e09d730300858d88"].port_guids == {"e09d730300858d88"}
