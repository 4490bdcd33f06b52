"""Usage errors: exit 2, one line on stderr, no traceback, whichever click typer brings.

Recent typer releases vendor click (typer._click) and raise their own copies of click's
exceptions; kiln's one error handler (kiln.app.main) must catch both.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kiln.app import main

USAGE_ERRORS = [
    (["nosuchcmd"], "No such command 'nosuchcmd'"),
    (["validate"], "Missing argument 'inventory'"),
    (["plan", "--nosuch", "x"], "No such option: --nosuch"),
    (["provision", "x", "--batch-size"], "requires an argument"),
    (["slurm", "nosuch"], "No such command 'nosuch'"),
]


@pytest.mark.parametrize(("argv", "says"), USAGE_ERRORS)
def test_usage_error_is_exit_2_in_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


@pytest.mark.local
@pytest.mark.parametrize(("argv", "says"), USAGE_ERRORS)
def test_the_real_cli_prints_no_traceback(argv, says):
    proc = subprocess.run(
        [sys.executable, "-m", "kiln", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and says in proc.stderr


def test_sigterm_runs_the_commands_clean_up_and_exits_143(monkeypatch, capsys):
    """A pipeline cancel sends SIGTERM: it reaches the command as Terminated (a
    KeyboardInterrupt, so every Ctrl-C clean-up runs), and kiln exits 143, not 130."""
    import os
    import signal
    import time

    from kiln import app
    from kiln.commands import validate as command

    cleaned = []

    def long_work(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler at once
        finally:
            cleaned.append("clean-up ran")

    monkeypatch.setattr(command, "load_cluster", long_work)
    monkeypatch.setattr(app, "_TERMINATED", [])  # this process's record of a SIGTERM
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exited:
            app.main(["validate", "inventories/sandbox"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exited.value.code == 143 and cleaned == ["clean-up ran"]
    assert "terminated (SIGTERM)" in capsys.readouterr().err
