"""`kiln report RUN`: render a stored burn-in run as a table, JSON, JUnit XML or HTML."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kiln.burnin import judge_run
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, out
from kiln.errors import EnvironmentProblem, ExitCode, InvalidInputError
from kiln.inventory import require_valid
from kiln.records.burnin import load_report, save_report
from kiln.report import render, render_table


class Format(StrEnum):
    table = "table"
    json = "json"
    junit = "junit"
    html = "html"


def report(
    run: Annotated[Path, typer.Argument(help="Burn-in run directory (or its report.json).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            help="Judge the run's raw results again with this inventory's profiles and floors "
            "(and store the new report.json in the run).",
        ),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Render a burn-in run: failing items first; JUnit for pipelines; HTML with plots.

    Exit 0 when every check passed, 1 when the run holds failures, 2 on unreadable input.

    Example:

        kiln report ~/.kiln/burnin/RUN-ID --format html --output report.html
    """
    if json:
        fmt = Format.json
    if inventory is not None:
        if not run.is_dir():
            raise InvalidInputError(f"--inventory needs a run directory, not {run}")
        burnin = judge_run(run, require_valid(inventory, use_vault(vault_id, vault_password_file)))
        err.print(f"judged {run}; stored {save_report(run, burnin)}")
    else:
        burnin = load_report(run)
    if output is not None:
        try:
            output.write_text(render(burnin, fmt.value), encoding="utf-8")
        except OSError as error:
            raise EnvironmentProblem(f"cannot write {output}: {error.strerror or error}") from None
        err.print(f"wrote {output} ({fmt.value})")
    elif fmt is Format.table:
        out.print(render_table(burnin))
    else:
        sys.stdout.write(render(burnin, fmt.value))
        sys.stdout.flush()
    return int(ExitCode.OK if burnin.passed else ExitCode.FAILED)
