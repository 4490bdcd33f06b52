"""`kiln exec` against a real, throwaway sshd on loopback addresses (no Docker).

Nodes: ctl01 and gpu001-003 answer; gpu004's host key is not in known_hosts; gpu006's
known_hosts entry is a different key; gpu005 points at a closed port.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

import sshd_fixture
from kiln.fleet import CommandOutcome, fold_results, render_text, run_command, select_nodes
from kiln.fleet.channel import MAX_OUTPUT
from kiln.inventory import require_valid

pytestmark = pytest.mark.local
sshd = sshd_fixture.sshd  # the module-scoped throwaway sshd fixture

KILN = str(Path(sys.executable).parent / "kiln")
HOSTS = {f"gpu00{i}": f"127.0.0.{i + 2}" for i in range(1, 7)}
GOOD = "ctl01,gpu00[1-3]"


@pytest.fixture(scope="module")
def inventory(sshd, tmp_path_factory) -> Path:
    known = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.7"]
    inventory = sshd.write_inventory(
        tmp_path_factory.mktemp("inv"),
        {"ctl01": "127.0.0.2", **HOSTS},
        known=known,
        hostvars={"gpu005": {"ansible_port": sshd_fixture.free_port()}},
    )
    wrong = paramiko.ECDSAKey.generate()
    with (inventory.parent / "known_hosts").open("a") as file:
        file.write(f"[127.0.0.8]:{sshd.port} {wrong.get_name()} {wrong.get_base64()}\n")
    return inventory


def run(inventory: Path, selector: str, command: str, **kwargs):
    nodes = select_nodes(require_valid(inventory), selector)
    return run_command(nodes, command, **kwargs)


def by_name(result) -> dict:
    return {node.name: node for node in result.results}


def test_identical_output_folds_into_one_hostlist(inventory):
    result = run(inventory, GOOD, "true")
    assert result.ok, [r.error for r in result.results]
    folds, problems = fold_results(result.results)
    assert render_text(folds, problems) == "---- ctl01,gpu[001-003] (4) ----\n"


def test_each_node_answers_for_itself(inventory):
    result = run(inventory, GOOD, "echo $SSH_CONNECTION | cut -d' ' -f3")
    assert {r.name: r.stdout for r in result.results} == {
        "ctl01": "127.0.0.2\n",
        "gpu001": "127.0.0.3\n",
        "gpu002": "127.0.0.4\n",
        "gpu003": "127.0.0.5\n",
    }
    folds, _ = fold_results(result.results)
    assert [fold.hostlist for fold in folds] == ["ctl01", "gpu001", "gpu002", "gpu003"]


def test_exit_code_stdout_and_stderr_apart(inventory):
    result = run(inventory, "gpu001", "echo out; echo err >&2; exit 3")
    node = result.results[0]
    assert (node.status, node.exit_code, node.stdout, node.stderr) == (
        CommandOutcome.FAILED, 3, "out\n", "err\n"
    )  # fmt: skip


def _running(marker: str) -> list[str]:
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in path.read_bytes().replace(b"\0", b" ").decode():
                found.append(path.parent.name)
        except OSError:
            continue
    return found


def test_timeout_is_enforced_and_the_remote_command_killed(inventory):
    start = time.monotonic()
    result = run(inventory, "gpu00[1-2]", "echo started; sleep 31.7; echo late", timeout=2)
    wall = time.monotonic() - start
    assert [r.status for r in result.results] == [CommandOutcome.TIMEOUT, CommandOutcome.TIMEOUT]
    assert all(r.stdout == "started\n" and r.duration >= 2 for r in result.results)
    assert result.results[0].error == "still running after 2s: killed"
    assert wall < 12, wall  # 2 s, plus a loaded CI machine's slack; never the 31.7 s
    deadline = time.monotonic() + 5
    while _running("sleep 31.7") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running("sleep 31.7") == []


def test_unknown_or_changed_host_key_is_refused_and_never_added(sshd, inventory):
    known_before = (inventory.parent / "known_hosts").read_text()
    nodes = by_name(run(inventory, "gpu004,gpu006,gpu001", "true"))
    assert nodes["gpu001"].status is CommandOutcome.OK
    assert nodes["gpu004"].status is CommandOutcome.HOSTKEY
    assert "unknown host key ssh-ed25519 SHA256:" in nodes["gpu004"].error
    assert (
        f"for [127.0.0.6]:{sshd.port}: not in {inventory.parent / 'known_hosts'}"
        in nodes["gpu004"].error
    )
    assert "kiln never adds host keys" in nodes["gpu004"].error
    assert nodes["gpu006"].status is CommandOutcome.HOSTKEY
    assert nodes["gpu006"].error.startswith(
        "host key mismatch for 127.0.0.8: got ssh-ed25519 SHA256:"
    )
    assert (inventory.parent / "known_hosts").read_text() == known_before


def test_unreachable_node_while_the_others_answer(inventory):
    nodes = by_name(run(inventory, "gpu00[1-3,5]", "hostname"))
    assert [nodes[n].status for n in ("gpu001", "gpu002", "gpu003")] == [CommandOutcome.OK] * 3
    assert nodes["gpu005"].status is CommandOutcome.UNREACHABLE
    assert nodes["gpu005"].error.endswith("Connection refused")


def test_large_output_is_drained_and_capped(inventory):
    node = run(inventory, "gpu001", "head -c 3000000 /dev/zero | tr '\\0' a").results[0]
    assert node.status is CommandOutcome.OK
    assert node.stdout.startswith("a" * MAX_OUTPUT + "\n[kiln: ")
    assert f"{3000000 - MAX_OUTPUT} more bytes dropped" in node.stdout


def test_proxy_jump_through_a_bastion(sshd, tmp_path):
    jump = f"-o ProxyJump={getpass.getuser()}@127.0.0.2:{sshd.port}"
    inventory = sshd.write_inventory(
        tmp_path / "inv", {"ctl01": "127.0.0.3", "gpu001": "127.0.0.4"}, common_args=jump
    )
    result = run(inventory, None, "echo $SSH_CONNECTION | cut -d' ' -f3")
    assert [(r.status, r.stdout) for r in result.results] == [
        (CommandOutcome.OK, "127.0.0.3\n"), (CommandOutcome.OK, "127.0.0.4\n")
    ]  # fmt: skip
    bad = sshd.write_inventory(
        tmp_path / "bad", {"ctl01": "127.0.0.3", "gpu001": "127.0.0.4"},
        known=["127.0.0.3", "127.0.0.4"], common_args=jump,
    )  # fmt: skip
    result = run(bad, None, "true")
    assert [r.status for r in result.results] == [CommandOutcome.UNREACHABLE] * 2
    assert result.results[0].error.startswith(f"jump host {getpass.getuser()}@127.0.0.2:")
    assert "unknown host key" in result.results[1].error


def kiln(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KILN, "exec", *args], capture_output=True, text=True, timeout=120)


def test_cli_text_json_and_exit_codes(inventory):
    proc = kiln(str(inventory), "--nodes", GOOD, "--", "echo", "$HOME")  # quoted, not expanded
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "---- ctl01,gpu[001-003] (4) ----\n$HOME\n"
    assert "4 node(s): 4 ok in " in proc.stderr

    proc = kiln(str(inventory), "-n", "gpu00[1,5]", "--json", "--", "uname -s")
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert (document["kiln"], document["command"], document["ok"]) == ("exec", "uname -s", False)
    assert document["counts"]["ok"] == 1 and document["counts"]["unreachable"] == 1
    first, second = document["nodes"]
    assert (first["name"], first["status"], first["exit_code"], first["stdout"]) == (
        "gpu001", "ok", 0, "Linux\n"
    )  # fmt: skip
    assert isinstance(first["duration"], float)
    assert (second["name"], second["status"], second["exit_code"]) == (
        "gpu005",
        "unreachable",
        None,
    )

    proc = kiln(str(inventory), "--nodes", "gpu0007", "--", "true")
    assert proc.returncode == 2
    assert "'gpu0007' matches no node" in proc.stderr and "did you mean gpu007" not in proc.stderr
