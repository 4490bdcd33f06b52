"""The kiln_ib and kiln_ib_ipoib_addresses inventory keys: defaults and refusals; compute
nodes declared by HCA GUID found in the fabric capture as topology.conf places them."""

from __future__ import annotations

from pathlib import Path

from kiln.fabric.topology import topology_from_text
from kiln.inventory import load_cluster

HOSTS = """\
all:
  children:
    kiln_controllers:
      hosts:
        ctl01: {ansible_host: 10.0.0.10}
    kiln_compute:
      vars: {kiln_gpu_model: h100-sxm, kiln_ib_hcas: [mlx5_0, "0x946dae0300cde72c", "0000:1a:00.0"]}
      hosts:
        gpu001: {ansible_host: 10.0.1.1, kiln_ib_ipoib_addresses: [10.100.1.1/16]}
"""


def load(tmp_path: Path, all_vars: str):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text(HOSTS)
    (tmp_path / "group_vars/all.yml").write_text(all_vars)
    return load_cluster(tmp_path)


def test_a_full_kiln_ib_is_valid_and_hcas_bind_by_name_guid_or_pci(tmp_path):
    result = load(
        tmp_path,
        """\
kiln_ib:
  subnet_manager: opensm
  opensm_hosts: [gpu001]
  link_rate_gbps: 200
  ipoib: [{network: 10.100.0.0/16, mtu: 4092}]
""",
    )
    assert result.ok, result.findings
    node = result.cluster.node("gpu001")
    assert node.ib_hcas == ("mlx5_0", "0x946dae0300cde72c", "0000:1a:00.0")


def test_mistakes_in_kiln_ib_are_findings_with_their_key(tmp_path):
    result = load(
        tmp_path,
        """\
kiln_ib:
  subnet_manager: opensm
  link_rate: 400
  ipoib: [{network: 10.100.0.1/16}]
""",
    )
    assert not result.ok
    messages = " | ".join(f.message for f in result.errors)
    assert all(f.key == "kiln_ib" for f in result.errors)
    assert "unknown key kiln_ib.link_rate" in messages
    assert "10.100.0.0/16" in messages  # the network has host bits set


def test_opensm_without_hosts_is_refused(tmp_path):
    result = load(tmp_path, "kiln_ib: {subnet_manager: opensm}\n")
    assert [f.key for f in result.errors] == ["kiln_ib"]
    assert "subnet_manager opensm needs opensm_hosts" in result.errors[0].message


def test_external_subnet_manager_with_opensm_hosts_is_refused(tmp_path):
    result = load(tmp_path, "kiln_ib: {subnet_manager: external, opensm_hosts: [gpu001]}\n")
    assert [
        "opensm_hosts is set but subnet_manager is external" in f.message for f in result.errors
    ] == [True]


# The man page's capture: every CA keeps the adapter's default description ("MT23108 InfiniHost
# Mellanox Technologies"), so only the GUIDs an inventory declares can say whose each CA is.
MANPAGE = (
    Path(__file__).parent.parent
    / "fixtures/real/ibnetdiscover/voltaire_isr9024_sw6ib4_sdr_manpage_grouping.txt"
)
BY_GUID = {  # host -> kiln_ib_hcas: node GUIDs as ibstat prints them, and one port GUID
    "node1": "0x0008F10403960984",
    "node2": "0x005442b100004900",
    "node3": "0008f10403961354",
    "node4": "0x0008f10403960559",  # port 1 of CA 0008f10403960558
}


def captured(tmp_path: Path, hcas: dict[str, str]):
    lines = [f"        {host}: {{kiln_ib_hcas: ['{hca}']}}" for host, hca in hcas.items()]
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    kiln_controllers:\n      hosts:\n        ctl01:\n"
        "    kiln_compute:\n      vars: {kiln_gpu_model: h100-sxm}\n      hosts:\n"
        + "\n".join(lines)
        + "\n"
    )
    (tmp_path / "group_vars/all.yml").write_text(
        "kiln_cluster_name: pod\n"
        "kiln_slurm:\n  topology: fabric\n  ibnetdiscover_file: fabric.txt\n"
    )
    (tmp_path / "fabric.txt").write_text(MANPAGE.read_text())
    return load_cluster(tmp_path)


def test_compute_nodes_declared_by_hca_guid_are_found_in_a_capture_of_default_descriptions(
    tmp_path,
):
    """validate finds a host in the capture as topology places it: by node GUID, then port
    GUID, then description; none of these CAs' descriptions names a host."""
    result = captured(tmp_path, BY_GUID)
    messages = [f.message for f in result.findings if f.key == "kiln_slurm"]
    assert not [m for m in messages if "holds none" in m or "lacks" in m], messages
    assert result.ok, result.findings
    placed = topology_from_text(result.cluster, MANPAGE.read_text(), MANPAGE.name)
    assert sorted(placed.topology.hosts) == sorted(BY_GUID)
    assert placed.topology.not_in_fabric == []


def test_a_compute_node_declared_by_name_on_such_a_fabric_is_still_missing(tmp_path):
    result = captured(tmp_path, {**BY_GUID, "node3": "mlx5_0"})
    messages = [f.message for f in result.warnings if f.key == "kiln_slurm"]
    assert [m for m in messages if "lacks 1 compute node(s): node3;" in m], messages
    assert not [f for f in result.errors if "holds none" in f.message]
