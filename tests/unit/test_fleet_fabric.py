"""The fan-out through fabric (kiln.fleet.session) against a real, throwaway sshd (no Docker):
fabric runs over the client kiln connected, never a connection of its own; many nodes at once;
stdin at EOF; output decoded whole. The behaviour tests of `kiln exec` are in
test_fleet_exec_ssh.py and pass unchanged."""

from __future__ import annotations

import shutil

import paramiko
import pytest

import sshd_fixture
from kiln.fleet import CommandOutcome, Connector, run_command, select_nodes, settings_for
from kiln.fleet.connect import _Reject
from kiln.fleet.session import KilnRemote, connection, run_on
from kiln.inventory import require_valid

pytestmark = pytest.mark.local
NODES = 48  # more than one worker per core: the run's threads share nothing by accident


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    if not sshd_fixture.SSHD.exists() or shutil.which("ssh-keygen") is None:
        pytest.skip(sshd_fixture.MISSING)
    root = tmp_path_factory.mktemp("fabric")
    addresses = [f"127.0.3.{i}" for i in range(1, NODES + 1)]
    server = sshd_fixture.start_sshd(root / "sshd", addresses, max_startups=4 * NODES)
    try:
        names = ["ctl01"] + [f"gpu{i:03d}" for i in range(1, NODES)]
        inventory = server.write_inventory(root, dict(zip(names, addresses, strict=True)))
        yield select_nodes(require_valid(inventory), "all")
    finally:
        sshd_fixture.stop_sshd(server)


def test_fabric_runs_over_the_client_kiln_connected(nodes):
    node = nodes[1]
    settings = settings_for(node.name, node.address, node.hostvars)
    connector = Connector()
    client = connector.connect(settings, settings.connect_timeout)
    try:
        conn = connection(settings, client)
        assert conn.client is client  # fabric's own client (AutoAddPolicy) is never used
        assert isinstance(client._policy, _Reject)  # host keys: kiln's, never added
        assert conn.config.runners.remote is KilnRemote
        # fabric's Config re-merges itself on access: one shared by the workers broke about 1
        # node in 50 under load ("No attribute or config key found for 'gateway'")
        assert connection(settings, client).config is not conn.config
        outcome = run_on(conn, "echo $((6 * 7)); echo oops >&2; exit 3", timeout=10)
        assert (outcome.exit_code, outcome.stdout, outcome.stderr) == (3, "42\n", "oops\n")
        assert not outcome.timed_out
    finally:
        client.close()
        connector.close()
    with pytest.raises(paramiko.SSHException, match="closed before the command"):
        connection(settings, client)  # a closed client is refused, never reopened by fabric


def test_many_nodes_at_once_each_answer_for_itself(nodes):
    result = run_command(nodes, "echo $SSH_CONNECTION", fanout=NODES)
    assert result.counts["ok"] == NODES, [(r.name, r.error) for r in result.results if r.error]
    assert [r.stdout.split()[2] for r in result.results] == [n.address for n in nodes]


def test_stdin_is_at_eof_and_output_is_decoded_whole(nodes):
    # 65,535 bytes and then a two-byte character: it spans the first 64 KiB read
    command = "cat; head -c 65535 /dev/zero | tr '\\0' a; printf '\\303\\251\\n'"
    node = run_command(nodes[:1], command, timeout=10).results[0]
    assert node.status is CommandOutcome.OK, node.error
    assert node.stdout == "a" * 65535 + "\u00e9\n"
    assert node.duration < 10
