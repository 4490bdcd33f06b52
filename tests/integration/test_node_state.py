"""Testinfra: the state the stages leave on each node, read over SSH like an operator would."""

from __future__ import annotations

import pytest
import testinfra

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hosts(sandbox, provisioned_sandbox):
    ssh_args = f"-o UserKnownHostsFile={sandbox.known_hosts} -o StrictHostKeyChecking=yes"
    return {
        node.name: (
            node,
            testinfra.get_host(
                f"ssh://root@{node.address}",
                ssh_identity_file=str(sandbox.private_key),
                ssh_extra_args=ssh_args,
            ),
        )
        for node in sandbox.nodes
    }


def test_base_packages_and_limits(hosts):
    for node, host in hosts.values():
        assert host.package("chrony").is_installed, node.name
        memlock = host.file("/etc/security/limits.d/90-kiln-memlock.conf")
        assert memlock.exists and "memlock" in memlock.content_string
        hosts_file = host.file("/etc/hosts").content_string
        for other, _ in hosts.values():
            assert other.address in hosts_file and other.name in hosts_file


def test_munge_and_slurm_daemons_run_and_start_at_boot(hosts):
    for node, host in hosts.values():
        munge = host.service("munge")
        assert munge.is_running and munge.is_enabled, node.name
        daemon = host.service("slurmctld" if node.role == "controller" else "slurmd")
        assert daemon.is_running and daemon.is_enabled, node.name
        key = host.file("/etc/munge/munge.key")
        assert (key.mode, key.user, key.group) == (0o400, "munge", "munge")
