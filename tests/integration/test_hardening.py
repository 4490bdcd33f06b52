"""Text from nodes is data on the real sandbox (issue 18): remote output with ANSI escapes and
rich markup, and a Slurm drain reason with `[/dev/sda]`, printed as they are, no crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
NODE2 = config.node_name(2)
WIDE = {"COLUMNS": "400", "NO_COLOR": "1"}  # one table row per line, whatever the terminal


def kiln(*args: str, state: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **WIDE, **({"KILN_HOME": str(state)} if state else {})}
    return subprocess.run([KILN, *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)  # fmt: skip


def on(container: str, *argv: str) -> str:
    proc = subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{container} {argv}: {proc.stderr}"
    return proc.stdout.strip()


def test_exec_prints_remote_markup_as_data_and_drops_escape_sequences(sandbox):
    command = r"printf '\033[31mmkfs: [/dev/sda] [bold]busy[/]\033[0m\a\n'"
    proc = kiln("exec", str(sandbox.inventory), "--", command)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "mkfs: [/dev/sda] [bold]busy[/]\\x07\n" in proc.stdout
    assert "\x1b" not in proc.stdout and "\a" not in proc.stdout


def test_status_prints_a_drain_reason_with_brackets_as_it_is(provisioned_sandbox):
    inventory, state = provisioned_sandbox.inventory, provisioned_sandbox.state
    reason = "disk [/dev/sda] [bold]smart[/] errors"
    on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=drain", f"reason={reason}")
    try:
        proc = kiln("status", str(inventory), state=state)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        row = next(line for line in proc.stdout.splitlines() if NODE2 in line)
        assert reason in row
    finally:
        on(CTL, "scontrol", "update", f"nodename={NODE2}", "state=resume")
