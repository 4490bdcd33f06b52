"""`kiln funnel INVENTORY`: where the bring-up stands, from the nodes' lifecycle log in the
cluster's shared state (kiln.lifecycle.funnel)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, folded, out, print_json, safe
from kiln.errors import InvalidInputError

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([dh])$")


def since_epoch(text: str, now: float | None = None) -> float:
    """`--since`: a UTC date or time (2026-11-20, 2026-11-20T08:00) or an age (7d, 36h)."""
    match = _AGO.match(text.strip())
    if match:
        hours = float(match[1]) * (24 if match[2] == "d" else 1)
        return (now if now is not None else time.time()) - hours * 3600
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"--since {text!r} is neither a date, a time nor an age",
            hint="for example --since 2026-11-20, --since 2026-11-20T08:00 or --since 7d",
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def render(report, since: float | None) -> None:
    window = "" if since is None else f" (times since {datetime.fromtimestamp(since, UTC):%F %R})"
    states = Table(title=f"{report.nodes} node(s) by lifecycle state", title_justify="left")
    for column in ("state", "nodes"):
        states.add_column(column)
    for state, count in report.per_state.items():
        if count:
            states.add_row(str(state), str(count))
    out.print(folded(states))
    steps = Table(title=f"time in each bring-up step{window}", title_justify="left")
    for column in ("step", "stays", "median", "p90"):
        steps.add_column(column)
    for step in report.steps:
        mark = " [bold yellow](slowest)[/]" if step.state is report.slowest else ""
        steps.add_row(
            f"{step.state}{mark}", str(step.stays), duration(step.median_s), duration(step.p90_s)
        )
    out.print(folded(steps))
    days = list(report.into_service_per_day.items())[-14:]
    if days:
        out.print("into service per day: " + ", ".join(f"{d} {n}" for d, n in days))
    if report.failure_reasons:
        out.print("failures: " + ", ".join(f"{safe(r)} {n}" for r, n in report.failure_reasons))


def show_node(lives: dict, node: str, where: str, json_: bool) -> int:
    """One node's history, oldest first: each state, when it entered and left, and why."""
    life = lives.get(node)
    if life is None:
        raise InvalidInputError(
            f"{node} has no lifecycle record in {where}",
            hint="a compute node enters the lifecycle at its first provision run",
        )
    doc = life.to_dict()
    if json_:
        print_json("funnel", {"log": where, **doc})
        return 0
    table = Table(title=f"{node}: {life.state} ({where})", title_justify="left")
    for column in ("state", "entered (UTC)", "for", "evidence"):
        table.add_column(column)
    now = time.time()
    for stay in doc["history"]:
        entered = datetime.fromtimestamp(stay["entered"], UTC).strftime("%F %T")
        held = (stay["left"] if stay["left"] is not None else now) - stay["entered"]
        mark = " (inferred)" if stay["inferred"] else ""
        table.add_row(f"{stay['state']}{mark}", entered, duration(held), safe(stay["evidence"]))
    out.print(folded(table))
    return 0


def funnel(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            show_default=False,
            help="Time only the stays, arrivals and failures from then on: a UTC date or time "
            "(2026-11-20T08:00) or an age (7d, 36h). Counts per state are always now.",
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            "--node", show_default=False, help="Show one node's lifecycle history instead."
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the funnel as JSON.")] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", show_default=False, help="Also write an HTML page: nodes per state over time."
        ),
    ] = None,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Where the bring-up stands: nodes per lifecycle state, nodes entering service per day,
    the median and p90 time in each bring-up step (the slowest named) and the top failure
    reasons, from the lifecycle log kiln keeps beside the cluster's shared state (provision
    runs, burn-in verdicts, `kiln triage` and `kiln rma` add to it), for the inventory's
    compute nodes; --node shows one node's history (each state, when, and the evidence that
    moved it). Reads only.

    Exit 0; 2 on invalid input; 3 when the shared state cannot be read or was written by a
    newer kiln.

    Example:

        kiln funnel inventories/prod --since 7d
    """
    from kiln.inventory import require_valid
    from kiln.lifecycle import funnel as make_funnel
    from kiln.state.lifecycle import lifecycle_log

    start = since_epoch(since) if since is not None else None
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    log = lifecycle_log(cluster)
    try:
        lives = log.lives()
    finally:
        log.close()
    if node is not None:
        return show_node(lives, node, log.where, json_)
    members = {node.name for node in cluster.compute}
    gone = len(lives.keys() - members)
    lives = {name: life for name, life in lives.items() if name in members}
    report = make_funnel(lives, since=start)
    if gone:  # their history stays in the log; the funnel is the inventory's
        err.print(f"[dim]{gone} node(s) no longer in the inventory left out[/]")
    if html is not None:
        from kiln.report.funnel import write_html

        write_html(html, cluster.name, lives, report)
        err.print(f"wrote {safe(str(html))}")
    if json_:
        print_json("funnel", {"cluster": cluster.name, "log": log.where, **report.to_dict()})
    elif not lives:
        err.print(f"no lifecycle event in {safe(log.where)} yet: provision runs, burn-ins, "
                  "kiln triage and kiln rma record them")  # fmt: skip
    else:
        err.print(f"[dim]{safe(log.where)}[/]")
        render(report, start)
    return 0
