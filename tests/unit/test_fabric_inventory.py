"""The kiln_ib and kiln_ib_ipoib_addresses inventory keys: defaults and refusals."""

from __future__ import annotations

from pathlib import Path

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
