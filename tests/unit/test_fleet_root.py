"""kiln.fleet.as_root and run_as_root: the one rule for running a command as root on a node.

kiln logs in as kiln.fleet.ssh.settings_for's user: ansible_user, ansible_ssh_user, `-l` or
`-o User=` in the inventory's SSH args, else the login user of the machine kiln runs on (as ssh
does with no user given). Root runs the command as it is; anyone else through `sudo -n sh -c`.
"""

from __future__ import annotations

import shlex
import subprocess
from types import SimpleNamespace

import pytest

from kiln.fleet import CommandOutcome, ExecResult, NodeResult, as_root, run_as_root

PROGRAM = "ibnetdiscover -p | grep -c 'Switch' > /tmp/x && echo \"$HOME\""


def node(name: str = "n1", **hostvars):
    return SimpleNamespace(name=name, address=f"10.0.0.{len(name)}", hostvars=hostvars)


def test_root_runs_the_command_itself():
    assert as_root(node(ansible_user="root"), PROGRAM) == PROGRAM
    assert as_root(node(ansible_ssh_user="root"), PROGRAM) == PROGRAM
    assert as_root(node(ansible_ssh_common_args="-o User=root"), PROGRAM) == PROGRAM


def test_another_user_goes_through_sudo_n_with_the_command_quoted_whole():
    command = as_root(node(ansible_user="ops"), PROGRAM)
    assert command == f"sudo -n sh -c {shlex.quote(PROGRAM)}"
    assert shlex.split(command) == ["sudo", "-n", "sh", "-c", PROGRAM]
    # ansible_user wins over the SSH args' user, as on ssh's command line
    assert as_root(node(ansible_user="ops", ansible_ssh_extra_args="-l root"), "id").startswith(
        "sudo -n "
    )


@pytest.mark.parametrize(("local", "sudo"), [("root", False), ("alice", True)])
def test_no_ssh_user_means_the_local_login_user_as_ssh_would(monkeypatch, local, sudo):
    """No ansible_user: kiln.fleet.connect logs in as the controller machine's login user (what
    ssh does with no user given), so that user decides; neither `always sudo` (which fails on a
    root login to a node without sudo) nor `never sudo` (which runs unprivileged as alice)."""
    monkeypatch.setattr("kiln.fleet.ssh.getpass.getuser", lambda: local)
    assert as_root(node(), "ibnetdiscover").startswith("sudo -n ") is sudo


def test_the_wrapped_command_runs_as_written_through_a_shell(tmp_path):
    (tmp_path / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (tmp_path / "sudo").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": "/home/x"}
    text = "printf '%s|' \"it's\" $HOME; echo done"
    command = as_root(node(ansible_user="ops"), text)
    out = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True,
                         check=True, timeout=10).stdout  # fmt: skip
    assert out == "it's|/home/x|done\n"


def test_run_as_root_groups_by_login_user_and_keeps_node_order():
    nodes = [node("a", ansible_user="ops"), node("bb", ansible_user="root"), node("ccc")]
    nodes[2].hostvars["ansible_user"] = "ops"
    calls = []

    def runner(group, command, *, fanout, timeout):
        calls.append(([n.name for n in group], command, fanout, timeout))
        answers = [NodeResult(n.name, n.address, CommandOutcome.OK, 0, command) for n in group]
        return ExecResult(command, answers, 0.5, fanout, timeout)

    result = run_as_root(nodes, "id -u", runner=runner, fanout=8, timeout=5.0)
    assert calls == [
        (["a", "ccc"], "sudo -n sh -c 'id -u'", 8, 5.0),
        (["bb"], "id -u", 8, 5.0),
    ]
    assert [r.name for r in result.results] == ["a", "bb", "ccc"]
    assert result.command == "id -u" and result.duration == 1.0 and result.ok
