"""Declared HCAs against sysfs (also as real and derived ibstat outputs show it): rail, HCA, why."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.fabric.ipoib import IpoibError, ipoib_address, ipoib_addresses
from kiln.fabric.links import binding_kind, check_rails, error_counter_deltas, parse_sysfs_dump
from kiln.parsers.ibstat import parse_ibstat

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = shared_capture("ibstat/h100_cx7_some_eth_ports_down.txt")
DEGRADED = FIXTURES / "derived/ibstat/h100_cx7_ib_degraded_rate_and_port_down.txt"
RAILS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]

SYSFS = """\
mlx5_0/device:0000:1a:00.0
mlx5_1/device:0000:3c:00.0
mlx5_0/node_guid:946d:ae03:00cd:e72c
mlx5_1/node_guid:946d:ae03:00cd:e884
mlx5_0/ports/1/state:4: ACTIVE
mlx5_0/ports/1/phys_state:5: LinkUp
mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)
mlx5_0/ports/1/link_layer:InfiniBand
mlx5_1/ports/1/state:1: DOWN
mlx5_1/ports/1/phys_state:2: Polling
mlx5_1/ports/1/rate:10 Gb/sec (4X SDR)
mlx5_1/ports/1/link_layer:InfiniBand
mlx5_0/ports/1/gids/0:fe80:0000:0000:0000:946d:ae03:00cd:e72c
mlx5_0/ports/1/counters/symbol_error:3
mlx5_0/ports/1/counters/link_downed:0
mlx5_0/ports/1/counters/port_xmit_data:123456789
"""


def sysfs_of(ibstat: Path) -> str:
    """What /sys/class/infiniband shows (as the infiniband role and burn-in read it) on the node
    whose `ibstat` output this is."""
    lines = []
    for ca in parse_ibstat(ibstat.read_text()):
        lines.append(f"{ca.name}/node_guid:{ca.node_guid}")
        for port in ca.ports:
            where = f"{ca.name}/ports/{port.number}"
            lines += [f"{where}/state:{port.state}", f"{where}/phys_state:{port.physical_state}"]
            lines += [
                f"{where}/rate:{port.rate_gbps:g} Gb/sec",
                f"{where}/link_layer:{port.link_layer}",
            ]
    return "\n".join(lines)


def test_the_real_h100_node_is_healthy_on_its_eight_ndr_rails():
    rails = check_rails(RAILS, parse_sysfs_dump(sysfs_of(REAL)), 400)
    assert [r.hca for r in rails] == RAILS and all(r.ok for r in rails)


def test_degraded_rate_and_port_down_name_the_rail_and_hca():
    rails = check_rails(RAILS, parse_sysfs_dump(sysfs_of(DEGRADED)), 400)
    problems = {r.rail: r.problems for r in rails if not r.ok}
    assert problems == {
        1: ("rail 1: mlx5_3 port 1 runs at 200 Gb/s, declared 400 Gb/s",),
        3: ("rail 3: mlx5_5 port 1 is Down/Polling, not Active/LinkUp",),
    }


def test_an_ethernet_port_or_a_missing_hca_is_a_problem():
    views = parse_sysfs_dump(sysfs_of(REAL))
    eth, missing = check_rails(["mlx5_1", "mlx5_99"], views, 400)
    assert eth.problems == (
        "rail 0: mlx5_1 port 1 is Ethernet, not InfiniBand",
        "rail 0: mlx5_1 port 1 runs at 100 Gb/s, declared 400 Gb/s",
    )
    assert missing.hca is None
    assert missing.problems[0].startswith("rail 1: HCA mlx5_99 (name) is not present (HCAs found: ")


def test_binding_by_guid_or_pci_never_by_order():
    assert [
        binding_kind(b) for b in ("mlx5_0", "0x946dae0300cde72c", "0000:1a:00.0", "1a:00.0")
    ] == ["name", "guid", "pci", "pci"]
    views = parse_sysfs_dump(SYSFS)
    by_guid, by_pci = check_rails(["0x946dae0300cde884", "1a:00.0"], views, 400)
    assert (by_guid.hca, by_guid.pci) == ("mlx5_1", "0000:3c:00.0")
    assert by_guid.problems == (
        "rail 0: mlx5_1 (0x946dae0300cde884) port 1 is Down/Polling, not Active/LinkUp",
    )
    assert (by_pci.hca, by_pci.node_guid, by_pci.ok) == ("mlx5_0", "946dae0300cde72c", True)


def test_sysfs_dump_reads_states_rates_and_counters():
    mlx5_0 = parse_sysfs_dump(SYSFS)[0]
    port = mlx5_0.ports[0]
    assert (port.state, port.physical_state, port.rate_gbps) == ("Active", "LinkUp", 400.0)
    assert port.guid == "946dae0300cde72c"  # opensm's PORTS lists port GUIDs
    assert mlx5_0.counters == {
        1: {"symbol_error": 3, "link_downed": 0, "port_xmit_data": 123456789}
    }
    assert check_rails([], parse_sysfs_dump(""), 400) == []
    assert check_rails(["mlx5_0"], [], 400)[0].problems == (
        "rail 0: HCA mlx5_0 (name) is not present (HCAs found: none)",
    )


def test_error_counter_deltas_ignore_data_counters_and_survive_a_reset():
    before = {"mlx5_0": {"symbol_error": 3, "link_downed": 1, "port_xmit_data": 10}}
    after = {"mlx5_0": {"symbol_error": 7, "link_downed": 0, "port_xmit_data": 99}}
    assert error_counter_deltas(before, after) == {"mlx5_0": {"symbol_error": 4}}
    after["mlx5_0"]["link_downed"] = 1  # reset to 0, then one more: reads as 1 new
    assert error_counter_deltas({"mlx5_0": {"link_downed": 5}}, after) == {
        "mlx5_0": {"symbol_error": 7, "link_downed": 1}
    }


def test_ipoib_address_mirrors_the_management_host_part():
    assert ipoib_address("10.100.0.0/16", "10.0.1.23") == "10.100.1.23/16"
    assert ipoib_addresses(["10.100.0.0/16", "10.101.0.0/16"], "10.0.1.23") == [
        "10.100.1.23/16",
        "10.101.1.23/16",
    ]
    assert ipoib_addresses(["10.100.0.0/16"], "gpu001", ["10.100.9.9/16"]) == ["10.100.9.9/16"]
    with pytest.raises(IpoibError, match="not an IP address"):
        ipoib_address("10.100.0.0/16", "gpu001.example")
    with pytest.raises(IpoibError, match="network address"):
        ipoib_address("10.100.0.0/16", "10.0.0.0")
    with pytest.raises(IpoibError, match="no prefix length"):
        ipoib_addresses([], "10.0.1.23", ["10.100.1.23"])
