"""Run a command as root on a node: the one rule every fleet caller follows.

kiln logs in as the user kiln.fleet.ssh.settings_for resolves for the node (ansible_user, then
ansible_ssh_user, then `-l` / `-o User=` in the inventory's SSH args, else the login user of the
machine kiln runs on, as ssh itself does with no user given). A command meant for root runs
as it is when that user is root, else through `sudo -n sh -c` (never a password prompt: a node
without passwordless sudo fails at once, with sudo's message on stderr).

The user is resolved exactly as kiln.fleet.connect logs in, so the decision needs no round trip
(no `id -u` on the node) and the command shown in a log is the one that ran.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from kiln.fleet.execute import ExecResult, NodeResult, run_command
from kiln.fleet.ssh import settings_for
from kiln.inventory import Node

ROOT = "root"
Runner = Callable[..., ExecResult]  # kiln.fleet.run_command's signature


def login_user(node: Node) -> str:
    """The user kiln logs into `node` as."""
    return settings_for(node.name, node.address, node.hostvars).user


def as_root(node: Node, command: str) -> str:
    """`command` as root on `node`: itself when kiln logs in as root, else through `sudo -n`."""
    if login_user(node) == ROOT:
        return command
    return f"sudo -n sh -c {shlex.quote(command)}"


def run_as_root(
    nodes: Sequence[Node],
    command: str,
    *,
    runner: Runner = run_command,
    fanout: int = 64,
    timeout: float = 60.0,
) -> ExecResult:
    """`command` as root on every node: one run_command per distinct wrapped command (one, where
    every node has the same login user), results in the order the nodes were given."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(as_root(node, command), []).append(node)
    answers: dict[str, NodeResult] = {}
    duration = 0.0
    for wrapped, group in groups.items():
        result = runner(group, wrapped, fanout=fanout, timeout=timeout)
        answers.update((answer.name, answer) for answer in result.results)
        duration += result.duration
    ordered = [answers[node.name] for node in nodes if node.name in answers]
    return ExecResult(command, ordered, duration, fanout, timeout)
