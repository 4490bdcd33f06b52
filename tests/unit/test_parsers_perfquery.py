"""perfquery on recorded real outputs (an EDR fabric: two switches and an HCA)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.fabric.links import ERROR_COUNTERS, error_counter_deltas
from kiln.parsers import ParseError
from kiln.parsers.perfquery import parse_perfquery

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "perfquery"
FAULTY = REAL / "edr_switch_ib-i4l1s01_port1_extended_with_errors.txt"
TWO_PORTS = REAL / "edr_switch_ib-i1l1s01_ports1-2_extended.txt"
HCA = REAL / "edr_hca_o0001_port1_extended.txt"
DETAILS = REAL / "edr_switch_ib-i1l1s01_port2_rcv_error_details.txt"


def errors(block) -> dict[str, int]:
    return {k: v for k, v in block.sysfs().items() if k in ERROR_COUNTERS and v}


def test_the_faulty_switch_port_shows_its_errors_under_the_sysfs_names():
    (port,) = parse_perfquery(FAULTY.read_text())
    assert (port.kind, port.lid, port.port, port.cap_mask) == (
        "Port extended counters", 2052, 1, 0x5300,
    )  # fmt: skip
    assert port.extended and len(port.counters) == 22  # 25 counter lines less the 3 select masks
    assert errors(port) == {
        "link_downed": 1,
        "port_rcv_switch_relay_errors": 7,
        "port_xmit_discards": 20046,
    }
    assert port.counters["PortXmitWait"] == 41864608  # congestion, not an error
    assert port.data_bytes() == (4 * 178791657177235, 4 * 178762341961629)


def test_two_port_blocks_and_a_clean_hca_port():
    one, two = parse_perfquery(TWO_PORTS.read_text())
    assert (one.lid, one.port, two.port) == (1719, 1, 2)
    assert two.counters["PortRcvData"] == 39078804993378 and two.counters["QP1Dropped"] == 0
    assert errors(one) == errors(two) == {}
    (hca,) = parse_perfquery(HCA.read_text())
    assert (hca.lid, hca.cap_mask, errors(hca)) == (134, 0x5A00, {})
    assert set(hca.sysfs()) >= set(ERROR_COUNTERS)  # every counter kiln watches is there


def test_receive_error_details_are_their_own_kind():
    (details,) = parse_perfquery(DETAILS.read_text())
    assert (details.kind, details.port, details.extended) == (
        "PortRcvErrorDetails counters", 2, False,
    )  # fmt: skip
    assert details.counters == {
        "PortLocalPhysicalErrors": 0, "PortMalformedPktErrors": 0, "PortBufferOverrunErrors": 0,
        "PortDLIDMappingErrors": 0, "PortVLMappingErrors": 0, "PortLoopingErrors": 0,
    }  # fmt: skip
    assert details.sysfs() == {} and details.data_bytes() is None


def test_readings_feed_the_same_rise_check_as_sysfs():
    (clean,), (faulty,) = parse_perfquery(HCA.read_text()), parse_perfquery(FAULTY.read_text())
    # As if one port had been read before (clean) and after (faulty) a burn-in.
    rises = error_counter_deltas({"port1": clean.sysfs()}, {"port1": faulty.sysfs()})
    assert rises == {
        "port1": {"link_downed": 1, "port_rcv_switch_relay_errors": 7, "port_xmit_discards": 20046}
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no '# ... counters"),
        ("SymbolErrorCounter:..............0\n", "counter before any"),
        ("# Port counters: Lid 5 port 1\nSymbolErrorCounter: lots\n", "at line 2"),
        ("# Port counters: Lid 5 port 1\nPortSelect:......2\n", "PortSelect differs"),
        ("# something else\n", "unknown header at line 1"),
    ],
)
def test_what_it_refuses(text, message):
    with pytest.raises(ParseError, match=message):
        parse_perfquery(text)


NEWER = REAL / "rhel75_hca_lid10_port1_extended_qp1dropped.txt"
FAILED = REAL / "failed_cannot_open_mad_port.txt"


def test_a_newer_release_and_its_stderr_folded_in():
    (port,) = parse_perfquery(NEWER.read_text())  # RHEL 7.5: QP1Dropped is printed too
    assert (port.lid, port.port, port.counters["QP1Dropped"]) == (10, 1, 0)
    assert errors(port) == {}
    # The real lines of a failed perfquery ahead of a good answer: skipped, named by line.
    skipped: list = []
    (again,) = parse_perfquery(FAILED.read_text() + NEWER.read_text(), skipped)
    assert again == port
    assert [(s.line_no, s.reason) for s in skipped] == [(1, "diagnostic"), (2, "diagnostic")]


def test_a_failed_perfquery_names_why():
    with pytest.raises(ParseError, match="no '# ... counters") as info:
        parse_perfquery(FAILED.read_text())
    assert info.value.line_no == 2
    assert info.value.line == "perfquery: iberror: failed: Failed to open '(null)' port '0'"
