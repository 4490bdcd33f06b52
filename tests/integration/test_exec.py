"""`kiln exec` across the sandbox cluster over real SSH (inventory keys, known_hosts checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.render.hostlist import compress

pytestmark = pytest.mark.integration
KILN = str(Path(sys.executable).parent / "kiln")


def kiln_exec(sandbox, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, "exec", str(sandbox.inventory), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_identical_output_folds_into_one_hostlist(sandbox):
    names = [node.name for node in sandbox.nodes]
    proc = kiln_exec(sandbox, "--", "uname -s")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"---- {compress(names)} ({len(names)}) ----\nLinux\n"
    assert f"{len(names)} node(s): {len(names)} ok in " in proc.stderr


def test_a_node_made_to_differ_is_shown_apart(sandbox):
    names = [node.name for node in sandbox.nodes]
    odd = names[1]
    rest = [name for name in names if name != odd]
    command = f'if [ "$(hostname)" = {odd} ]; then echo odd; else echo same; fi'
    proc = kiln_exec(sandbox, "--", command)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"---- {compress(rest)} ({len(rest)}) ----\nsame\n---- {odd} (1) ----\nodd\n"
    )


def test_every_node_answers_for_itself_in_json(sandbox):
    proc = kiln_exec(sandbox, "--json", "--", "hostname")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert [(n["name"], n["stdout"], n["status"], n["exit_code"]) for n in document["nodes"]] == [
        (node.name, f"{node.name}\n", "ok", 0) for node in sandbox.nodes
    ]
    assert [group["count"] for group in document["groups"]] == [1] * len(sandbox.nodes)


def test_timeout_is_enforced(sandbox):
    compute = [node.name for node in sandbox.nodes if node.role == "compute"]
    start = time.monotonic()
    proc = kiln_exec(
        sandbox, "--nodes", "kiln_compute", "--timeout", "2", "--json", "--", "sleep 30"
    )
    wall = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert [(n["name"], n["status"]) for n in document["nodes"]] == [
        (name, "timeout") for name in compute
    ]
    assert all(2 <= n["duration"] < 10 for n in document["nodes"])
    assert wall < 25, wall  # never the 30 s the command asked for
    # the killed command is gone from every node
    proc = kiln_exec(sandbox, "--nodes", "kiln_compute", "--", "pgrep -x sleep || echo none")
    assert proc.stdout == f"---- {compress(compute)} ({len(compute)}) ----\nnone\n"


def test_a_stopped_node_is_unreachable_while_the_rest_answer(sandbox, tmp_path):
    victim = sandbox.nodes[-1].name
    others = [node.name for node in sandbox.nodes if node.name != victim]
    subprocess.run(["docker", "stop", "-t", "2", victim], check=True, capture_output=True)
    try:
        proc = kiln_exec(sandbox, "--json", "--", "hostname")
    finally:
        subprocess.run(["docker", "start", victim], check=True, capture_output=True)
    assert proc.returncode == 1, proc.stderr
    status = {node["name"]: node["status"] for node in json.loads(proc.stdout)["nodes"]}
    assert status == {**dict.fromkeys(others, "ok"), victim: "unreachable"}
    # The node comes back with systemd; once sshd answers, put back what Docker reset on
    # restart (its /etc/hosts) so later tests find the node as the stages left it.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if kiln_exec(sandbox, "--nodes", victim, "--", "true").returncode == 0:
            break
        time.sleep(2)
    restored = subprocess.run(
        [KILN, "provision", str(sandbox.inventory), "--stages", "base", "--limit", victim,
         "--yes"],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "KILN_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr[-3000:]
