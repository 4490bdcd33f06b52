"""Tables never cut a host name: off a terminal (a pipe, a log) the page is wide; on a narrow
terminal a long cell folds over lines instead of ending in an ellipsis (issue 20)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from rich.console import Console
from rich.table import Table

from kiln.console import OFF_TERMINAL_WIDTH, folded, page_width

SANDBOX = "kiln-node01"
LONG = "gpu-rack17-row03-node0042-hgx-h100-sxm5-a"  # 41 characters
assert len(LONG) >= 40

# Each table-printing command's renderer, fed the sandbox's host name and a 40-char one; run in
# a child whose stdout is a pipe and whose environment has no COLUMNS, as under CI or `| tee`.
RENDER_ALL = f"""
from kiln.commands.drain import render as drain_render
from kiln.commands.provision import render_summary
from kiln.commands.status import render_table as status_table
from kiln.console import out
from kiln.judging.model import BurninReport
from kiln.judging.verdicts import Action, Severity, Verdict
from kiln.report import render_table as burnin_table
from kiln.runner.events import HostResult
from kiln.runner.outcome import StageOutcome
from kiln.runner.result import RunResult
from kiln.slurmctl.ops import NodeChange, OpResult
from kiln.slurmctl.status import ClusterStatus, StatusRow
from pathlib import Path

names = [{SANDBOX!r}, {LONG!r}]
hosts = {{n: HostResult(n, "ok") for n in names}}
stages = [StageOutcome(s, s + ".yml", "ok", hosts) for s in ("base", "slurm", "monitoring")]
result = RunResult("r1", "inv", "sandbox", "rec", False, None, False, "100%", 0, None, None,
                   "t", names, stages=stages)
result.finish("t")
render_summary(result)
status = ClusterStatus("sandbox", "kiln-ctl", [StatusRow(n, True, None, 0) for n in names])
status_table(status)
op = OpResult("drain", "kiln-ctl", reason="kiln burn-in",
              nodes=[NodeChange(n, None, None, "drain", "drained for burn-in") for n in names])
drain_render(op, Path("inv"), False)
report = BurninReport("sandbox")
for n in names:
    report.verdicts.append(Verdict("node", n, "gemm", False, 1.0, 2.0, "TFLOP/s",
                                   Severity.CRITICAL, Action.DRAIN, "slow GEMM", node=n))
out.print(burnin_table(report))
"""


def test_every_table_printed_to_a_pipe_keeps_every_host_name_whole():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-c", RENDER_ALL], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "…" not in text and "..." not in text
    for name in (SANDBOX, LONG):  # whole, on one line, in each of the four tables
        assert sum(line.count(name) for line in text.splitlines()) >= 4, text


def test_off_a_terminal_the_page_is_wide_unless_columns_says_otherwise(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert page_width(io.StringIO()) == OFF_TERMINAL_WIDTH
    monkeypatch.setenv("COLUMNS", "90")
    assert page_width(io.StringIO()) is None  # rich reads COLUMNS itself


def test_on_a_narrow_terminal_a_long_name_folds_and_is_never_cut():
    table = Table("host", "base", "slurm", "detail")
    table.add_row(LONG, "ok", "changed", "a long detail that has to give way " * 3)
    buffer = io.StringIO()
    Console(file=buffer, width=60, force_terminal=True, color_system=None).print(folded(table))
    text = buffer.getvalue()
    assert "…" not in text
    assert LONG in text  # the name column is as wide as the name: the detail folds instead
