"""ibstat against a recorded real H100 node (and a derived degraded variant)."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.ibstat import parse_ibstat

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = shared_capture("ibstat/h100_cx7_some_eth_ports_down.txt")
DEGRADED = FIXTURES / "derived/ibstat/h100_cx7_ib_degraded_rate_and_port_down.txt"


def test_real_h100_cas_and_ports() -> None:
    cas = parse_ibstat(REAL.read_text())
    assert [ca.name for ca in cas] == [
        "mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11", "mlx5_2", "mlx5_3",
        "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
    ]  # fmt: skip
    ca = cas[0]
    assert ca.ca_type == "MT4129"
    assert ca.number_of_ports == 1
    assert ca.firmware_version == "28.39.1002"
    assert ca.node_guid == "946dae0300cde72c"
    assert ca.system_image_guid == "946dae0300cde72c"
    port = ca.port(1)
    assert port is not None
    assert (port.state, port.physical_state, port.rate_gbps) == ("Active", "LinkUp", 400.0)
    assert (port.base_lid, port.lmc, port.sm_lid) == (75, 0, 334)
    assert port.port_guid == "946dae0300cde72c"
    assert port.link_layer == "InfiniBand"
    assert port.capability_mask == "0xa751e848"
    assert port.is_up and port.is_infiniband


def test_real_h100_down_ethernet_ports() -> None:
    cas = {ca.name: ca for ca in parse_ibstat(REAL.read_text())}
    ib = [n for n, ca in cas.items() if ca.ports[0].is_infiniband]
    assert len(ib) == 8 and all(cas[n].ports[0].is_up for n in ib)
    down = sorted(n for n, ca in cas.items() if not ca.ports[0].is_up)
    assert down == ["mlx5_2", "mlx5_7", "mlx5_8"]
    port = cas["mlx5_2"].ports[0]
    assert (port.state, port.physical_state, port.rate_gbps) == ("Down", "Disabled", 40.0)
    assert port.link_layer == "Ethernet"
    assert cas["mlx5_2"].ca_type == "MT4125"
    assert cas["mlx5_2"].system_image_guid == "946dae0300c2b690"  # shares mlx5_1's board
    assert cas["mlx5_1"].ports[0].port_guid == "966daefffec2b690"


def test_derived_degraded_rate_and_ib_port_down() -> None:
    cas = {ca.name: ca for ca in parse_ibstat(DEGRADED.read_text())}
    assert cas["mlx5_3"].ports[0].is_up and cas["mlx5_3"].ports[0].rate_gbps == 200.0
    port = cas["mlx5_5"].ports[0]
    assert port.is_infiniband and not port.is_up
    assert (port.state, port.physical_state, port.rate_gbps) == ("Down", "Polling", 10.0)
    slow = [
        n for n, ca in cas.items() if ca.ports[0].is_infiniband and ca.ports[0].rate_gbps != 400
    ]
    assert sorted(slow) == ["mlx5_3", "mlx5_5"]


def test_malformed_line_is_named() -> None:
    text = REAL.read_text().replace("\tFirmware version: 28.39.1002", "\tFirmware version 28", 1)
    with pytest.raises(ParseError) as info:
        parse_ibstat(text)
    assert info.value.tool == "ibstat"
    assert info.value.line_no == 4


def test_not_ibstat_output() -> None:
    # Nothing usable: the error names the line that says why (it is skipped, not read).
    with pytest.raises(ParseError, match="no CA found") as info:
        parse_ibstat("ibstat: command not found\n")
    assert info.value.line_no == 1


PANIC = FIXTURES / "derived/ibstat/h100_cx7_ibpanic_at_second_ca.txt"


def test_a_panic_folded_in_is_skipped_and_the_cas_before_it_kept() -> None:
    # libibumad's real panic (rdma-core#239) where ibstat stopped: skipped and named by line.
    skipped: list = []
    cas = parse_ibstat(PANIC.read_text(), skipped)
    assert [ca.name for ca in cas] == ["mlx5_0"] and cas[0].ports[0].is_up
    assert [(s.line_no, s.reason) for s in skipped] == [(18, "diagnostic")]
    assert "stat of IB device 'mlx5_1' failed" in skipped[0].line
    assert [ca.name for ca in parse_ibstat(PANIC.read_text())] == ["mlx5_0"]  # no list: same
