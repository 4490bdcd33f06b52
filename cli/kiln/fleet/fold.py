"""dshbak-style folding: nodes that answered alike are shown once, under one hostlist.

Nodes fold together when their status, exit code, stdout and stderr are all identical (stderr
too: two nodes failing with different messages are different answers). Groups are ordered
largest first, ties in inventory order. Nodes that never ran the command (unreachable, host key
refused) fold by their reason and come last. Pure functions: the command prints the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kiln.fleet.execute import CommandOutcome, ExecResult, NodeResult
from kiln.render.hostlist import compress

NO_OUTPUT = (CommandOutcome.UNREACHABLE, CommandOutcome.HOSTKEY)


@dataclass(frozen=True)
class Fold:
    """Nodes that ran the command and answered identically."""

    hosts: tuple[str, ...]
    status: CommandOutcome
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None = None

    @property
    def hostlist(self) -> str:
        return compress(self.hosts)

    def header(self) -> str:
        state = {CommandOutcome.OK: "", CommandOutcome.TIMEOUT: " timeout"}.get(self.status)
        if state is None:
            state = f" exit {self.exit_code}" if self.exit_code is not None else " failed"
        return f"---- {self.hostlist} ({len(self.hosts)}){state} ----"


@dataclass(frozen=True)
class Problem:
    """Nodes that never ran the command, for the same reason."""

    hosts: tuple[str, ...]
    status: CommandOutcome
    error: str

    @property
    def hostlist(self) -> str:
        return compress(self.hosts)

    def header(self) -> str:
        return f"---- {self.hostlist} ({len(self.hosts)}) {self.status} ----"


def _grouped(items: Iterable[tuple[tuple, NodeResult]]) -> list[list[NodeResult]]:
    groups: dict[tuple, list[NodeResult]] = {}
    for key, result in items:
        groups.setdefault(key, []).append(result)
    # dicts keep first-seen order, and sorted() is stable: ties stay in inventory order
    return sorted(groups.values(), key=len, reverse=True)


def fold_results(results: Sequence[NodeResult]) -> tuple[list[Fold], list[Problem]]:
    """Fold per-node results (in inventory order) into answer groups and problem groups."""
    ran = [
        ((r.status, r.exit_code, r.stdout, r.stderr), r)
        for r in results
        if r.status not in NO_OUTPUT
    ]
    folds = [
        Fold(tuple(r.name for r in group), group[0].status, group[0].exit_code,
             group[0].stdout, group[0].stderr, group[0].error)
        for group in _grouped(ran)
    ]  # fmt: skip
    failed = [((r.status, r.error or ""), r) for r in results if r.status in NO_OUTPUT]
    problems = [
        Problem(tuple(r.name for r in group), group[0].status, group[0].error or "")
        for group in _grouped(failed)
    ]
    return folds, problems


def _block(text: str) -> list[str]:
    return text.rstrip("\n").split("\n") if text.strip("\n") else []


def render_text(folds: Sequence[Fold], problems: Sequence[Problem]) -> str:
    """The folded answers as text: a header per group, then its output."""
    lines: list[str] = []
    for fold in folds:
        lines.append(fold.header())
        lines += _block(fold.stdout)
        if fold.stderr.strip():
            lines += ["-- stderr --", *_block(fold.stderr)]
        if fold.status is CommandOutcome.TIMEOUT and fold.error:
            lines.append(f"-- {fold.error} --")
    for problem in problems:
        lines += [problem.header(), problem.error]
    return "\n".join(lines) + ("\n" if lines else "")


def summary(result: ExecResult) -> str:
    """One line: how many nodes ended how, and how long it took."""
    parts = [f"{count} {status}" for status, count in result.counts.items() if count]
    return f"{len(result.results)} node(s): {', '.join(parts) or 'none'} in {result.duration:.1f}s"
