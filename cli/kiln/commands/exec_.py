"""`kiln exec INVENTORY -- COMMAND`: one command on many nodes over SSH, answers folded."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import clean, err, print_json, safe
from kiln.errors import ExitCode, InvalidInputError
from kiln.fleet import NodeResult, fold_results, render_text, run_command, select_nodes, summary
from kiln.inventory import require_valid


class ProgressBar:
    """done/failed/timeout counts on stderr while nodes answer; silent when not a TTY."""

    def __init__(self, total: int) -> None:
        self.counts = {"ok": 0, "failed": 0, "timeout": 0, "unreachable": 0, "hostkey": 0}
        self.progress = Progress(
            TextColumn("exec"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.description}"), TimeElapsedColumn(),
            console=err, transient=True, disable=not err.is_terminal,
        )  # fmt: skip
        self.task = self.progress.add_task("", total=total)

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self, result: NodeResult) -> None:
        self.counts[str(result.status)] += 1
        text = ", ".join(f"{count} {name}" for name, count in self.counts.items() if count)
        self.progress.update(self.task, advance=1, description=text)


def exec_(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    command: Annotated[
        list[str],
        typer.Argument(
            help="The command, after `--`: one argument is passed to the remote "
            "shell as typed; several are quoted and joined.",
            show_default=False,
        ),
    ],  # fmt: skip
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            "-n",
            help="Hosts, groups, hostlists (gpu[001-040]), globs, "
            "!exclusions, comma-separated. Default: every node.",
        ),
    ] = None,  # fmt: skip
    fanout: Annotated[
        int, typer.Option("--fanout", "-f", min=1, help="Nodes worked on at once.")
    ] = 64,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            "-t",
            min=0.1,
            help="Seconds a command may run on a node; then it is killed.",
        ),
    ] = 60.0,
    json_: Annotated[bool, typer.Option("--json", help="Per-node results as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Run one command on many nodes over SSH and print the answers folded by hostlist.

    Uses the inventory's users, keys, ports, jump hosts and known_hosts; host key checking stays on.

    Exit 0 when every node exits 0; 1 when any fails, times out or is unreachable; 2 on an invalid
    inventory or a selector that matches nothing.

    Example:

        kiln exec inventories/sandbox --nodes kiln_compute -- nproc
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    text = command[0] if len(command) == 1 else shlex.join(command)
    if not text.strip():
        raise InvalidInputError("the command is empty", hint="kiln exec INVENTORY -- COMMAND")
    selected = select_nodes(cluster, nodes)
    with ProgressBar(len(selected)) as bar:
        result = run_command(selected, text, fanout=fanout, timeout=timeout, on_result=bar.advance)
    folds, problems = fold_results(result.results)
    if json_:
        print_json("exec", {
            "inventory": str(inventory.resolve()),
            "command": text,
            "nodes_selector": nodes,
            "fanout": fanout,
            "timeout": timeout,
            "duration": round(result.duration, 3),
            "ok": result.ok,
            "counts": result.counts,
            "groups": [
                {"hosts": group.hostlist, "count": len(group.hosts), "status": str(group.status),
                 "exit_code": getattr(group, "exit_code", None)}
                for group in [*folds, *problems]
            ],
            "nodes": [node.to_dict() for node in result.results],
        })  # fmt: skip
    else:
        sys.stdout.write(clean(render_text(folds, problems)))  # remote output is data
        sys.stdout.flush()
    err.print(safe(summary(result)))
    return int(ExitCode.OK if result.ok else ExitCode.FAILED)
