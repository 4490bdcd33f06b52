"""The real sandbox: systemd in every container, SSH with host key checking, Ansible ping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.sandbox import cluster, ssh

pytestmark = pytest.mark.integration
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def up(sandbox):
    return sandbox


def test_up_prints_the_inventory_path(up) -> None:
    assert up.up_stdout.strip() == str(up.inventory)
    assert (up.inventory / "hosts.yml").is_file()
    assert (up.inventory / "group_vars" / "all.yml").is_file()


def test_every_container_runs_systemd(up) -> None:
    for node in up.nodes:
        proc = subprocess.run(
            ["docker", "exec", node.name, "systemctl", "is-system-running"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.stdout.strip() in cluster.READY_STATES, (node.name, proc.stdout)
        pid1 = subprocess.run(
            ["docker", "exec", node.name, "cat", "/proc/1/comm"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert pid1.stdout.strip() == "systemd"


def test_ssh_with_host_key_checking_works_to_every_node(up) -> None:
    for node in up.nodes:
        cmd = ssh.ssh_command(node, up.private_key, up.known_hosts, "hostname")
        assert "StrictHostKeyChecking=yes" in cmd
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == node.name


def test_ssh_refuses_a_node_whose_host_key_is_not_known(up, tmp_path) -> None:
    node = up.nodes[0]
    wrong = tmp_path / "known_hosts"
    other = up.nodes[1]
    key = ssh.host_key(other)
    wrong.write_text(ssh.known_hosts_line(node, key) + "\n")  # another node's key
    proc = subprocess.run(
        ssh.ssh_command(node, up.private_key, wrong), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 255
    assert "host key" in proc.stderr.lower()


def test_every_node_has_its_own_host_key(up) -> None:
    keys = {ssh.host_key(node) for node in up.nodes}
    assert len(keys) == len(up.nodes)


def test_ansible_ping_succeeds_with_the_written_inventory(up) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", str(up.inventory), "all", "-m", "ping"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for node in up.nodes:
        assert f"{node.name} | SUCCESS" in proc.stdout


def test_status_reports_every_node_running(up) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "kiln"), "sandbox", "status", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    document = json.loads(proc.stdout)
    assert document["kiln"] == "sandbox-status"
    rows = {row["name"]: row for row in document["nodes"]}
    for node in up.nodes:
        assert rows[node.name]["address"] == node.address
        assert rows[node.name]["state"] == "running"
        assert rows[node.name]["systemd"] in cluster.READY_STATES
