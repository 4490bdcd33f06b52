"""The DCGM phase of a burn-in: `dcgmi diag -r <level> -j` on every tested GPU node, judged.

    runs = dcgm_phase(nodes, outcome, layout, progress)   # after the jobs, inside the reservation

Level by suite: quick 1, standard 2, soak 3 (kiln.judging.rules_dcgm.DCGM_LEVELS). The phase
runs after the burn-in jobs, while the maintenance reservation still keeps production work off
the nodes, and only on GPU nodes that were tested (their GEMM result came home): a node busy with
someone else's job, or one that gave no result, is not touched. Over SSH as root (kiln.fleet):

1. a probe (`command -v dcgmi`, through kiln.burnin.collect.run_as_root like the other reads):
   a GPU node without dcgmi is not validated (not run is never passed), and its verdict says so;
2. `timeout <limit> dcgmi diag -r <level> -j` on every node that has it, all at once; its stdout,
   stderr and exit status are stored in the run record as dcgm/<node>.json (a DcgmRun), so the
   run can be judged again without the nodes.

Each node's run becomes `dcgm` verdicts (kiln.judging.rules_dcgm: a failed test drains the node;
a skipped required test, a missing dcgmi, a host engine that does not answer or a diag that
errored leaves it not validated, so the run lists it as not tested) added to the report.
A run without GPU nodes (the sandbox) skips the phase and says so in its progress.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.burnin import collect
from kiln.fleet import CommandOutcome, NodeResult, run_as_root
from kiln.inventory import Node
from kiln.judging.model import BurninReport
from kiln.judging.rules_dcgm import (
    ABSENT,
    CHECK,
    NO_ANSWER,
    NOT_VALIDATED,
    RAN,
    DcgmRun,
    judge_dcgm,
    level_for,
)
from kiln.records.burnin import RunLayout
from kiln.records.documents import RunDocuments

if TYPE_CHECKING:  # campaign imports this module when its DCGM phase runs
    from kiln.burnin.campaign import BurninOutcome

Progress = Callable[[str], None]
Runner = Callable[[list[Node], str], list[NodeResult]]
LongRunner = Callable[[list[Node], str, float], list[NodeResult]]

MARK = "kiln-dcgm"
DIRECTORY = "dcgm"
# How long dcgmi may run per level (8 GPUs: level 3 takes tens of minutes), then SSH's margin.
LIMIT_SECONDS = {1: 600, 2: 1800, 3: 5400}
SSH_MARGIN_SECONDS = 180
FANOUT_MAX = 1024

PROBE = (
    f"if command -v dcgmi >/dev/null 2>&1; then echo '{MARK} present'; "
    f"else echo '{MARK} absent'; fi; echo \"{MARK} host $(hostname)\""
)


def diag_command(level: int) -> str:
    """What runs on a node: dcgmi under a hard limit, its exit status on a marker line."""
    limit = LIMIT_SECONDS.get(level, LIMIT_SECONDS[3])
    return (
        f'echo "{MARK} host $(hostname)"; '
        f'timeout -k 60 {limit} dcgmi diag -r {int(level)} -j; echo "{MARK} rc $?"'
    )


def _marks(stdout: str) -> tuple[dict[str, str], str]:
    """The marker lines ({"host": ..., "rc": ...}) and everything else (dcgmi's output)."""
    marks: dict[str, str] = {}
    rest = []
    for line in stdout.splitlines():
        if line.startswith(MARK + " "):
            word, _, value = line[len(MARK) + 1 :].partition(" ")
            marks[word] = value.strip()
        else:
            rest.append(line)
    return marks, "\n".join(rest) + ("\n" if rest else "")


def _no_answer(node: str, level: int, res: NodeResult) -> DcgmRun:
    return DcgmRun(node, level, NO_ANSWER, error=f"{res.status}: {res.error or res.stderr}".strip())


def _from_diag(level: int, res: NodeResult) -> DcgmRun:
    if res.status not in (CommandOutcome.OK, CommandOutcome.FAILED):
        return _no_answer(res.name, level, res)
    marks, output = _marks(res.stdout)
    if "rc" not in marks:
        return DcgmRun(
            res.name,
            level,
            NO_ANSWER,
            output=output,
            host=marks.get("host"),
            error=f"dcgmi did not finish ({res.stderr.strip()[:200] or res.status})",
        )
    try:
        code: int | None = int(marks["rc"])
    except ValueError:
        code = None
    return DcgmRun(res.name, level, RAN, output=output, exit_code=code,
                   error=res.stderr.strip()[:500], host=marks.get("host"))  # fmt: skip


def run_as_root_for(nodes: list[Node], command: str, timeout: float) -> list[NodeResult]:
    """`command` as root on every node at once (a long one: its own timeout), in node order."""
    fanout = max(1, min(len(nodes), FANOUT_MAX))
    return run_as_root(nodes, command, timeout=timeout, fanout=fanout).results


def run_dcgm(
    nodes: Sequence[Node],
    level: int,
    layout: RunLayout,
    progress: Progress,
    *,
    probe: Runner | None = None,
    run: LongRunner | None = None,
) -> list[DcgmRun]:
    """Probe, run and record DCGM on `nodes` at `level`; one DcgmRun per node, in node order."""
    nodes = list(nodes)
    probe = probe or collect.run_as_root  # looked up now: tests replace it
    runs: dict[str, DcgmRun] = {}
    present: list[Node] = []
    by_name = {n.name: n for n in nodes}
    for res in probe(nodes, PROBE):
        marks, _ = _marks(res.stdout)
        if res.status is not CommandOutcome.OK:
            runs[res.name] = _no_answer(res.name, level, res)
        elif "present" in marks:
            present.append(by_name[res.name])
        elif "absent" in marks:
            runs[res.name] = DcgmRun(res.name, level, ABSENT, host=marks.get("host"))
            progress(f"DCGM: {res.name} has no dcgmi; it cannot be validated")
        else:
            said = res.stdout.strip()[:120]
            runs[res.name] = DcgmRun(
                res.name, level, NO_ANSWER, error=f"unexpected answer to the dcgmi probe: {said!r}"
            )
    if present:
        limit = LIMIT_SECONDS.get(level, LIMIT_SECONDS[3])
        progress(
            f"DCGM: dcgmi diag -r {level} on {len(present)} node(s), at most {limit // 60} min"
        )
        for res in (run or run_as_root_for)(present, diag_command(level),
                                            limit + SSH_MARGIN_SECONDS):  # fmt: skip
            runs[res.name] = _from_diag(level, res)
    ordered = [runs[n.name] for n in nodes if n.name in runs]
    for item in ordered:
        save_run(layout, item)
    return ordered


def record_path(layout: RunLayout, node: str) -> Path:
    return layout.root / DIRECTORY / f"{node}.json"


def save_run(layout: RunLayout, run: DcgmRun) -> Path:
    path = record_path(layout, run.node)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**run.to_dict(), "command": f"dcgmi diag -r {run.level} -j"}
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def load_runs(run_dir: Path | str) -> list[DcgmRun]:
    """The DCGM runs a run record holds (none before kiln ran DCGM, or without GPU nodes)."""
    folder = Path(run_dir) / DIRECTORY
    if not folder.is_dir():
        return []
    return [
        DcgmRun.from_dict(json.loads(path.read_text(encoding="utf-8")))
        for path in sorted(folder.glob("*.json"))
    ]


def add_verdicts(report: BurninReport, runs: Iterable[DcgmRun]) -> None:
    """Replace the report's `dcgm` verdicts with those of `runs` (judging again is idempotent).
    A node DCGM could not validate is also one the run did not test (`report.not_tested`): the
    run is incomplete, and a node kiln had drained keeps its drain."""
    report.verdicts = [v for v in report.verdicts if v.check != CHECK]
    report.not_tested = {
        node: why for node, why in report.not_tested.items() if not why.startswith(NOT_VALIDATED)
    }
    for item in runs:
        verdicts = judge_dcgm(item)
        report.verdicts += verdicts
        for v in verdicts:
            if v.subject == "node" and not v.passed and v.message.startswith(NOT_VALIDATED):
                report.not_tested.setdefault(v.name, v.message)
    report.sort()


def add_recorded_verdicts(report: BurninReport, run_dir: Path | str) -> None:
    """For judging a stored run again (kiln.burnin.judge_run): the recorded DCGM runs' verdicts."""
    runs = load_runs(run_dir)
    if runs:
        add_verdicts(report, runs)


def tested_nodes(report: BurninReport, layout: RunLayout, names: Iterable[str]) -> set[str]:
    """Nodes whose burn-in result was judged readable (their `result` verdict passed); where the
    report has no `result` verdicts at all, the nodes whose GEMM result is in the record."""
    results = [v for v in report.verdicts if v.check == "result" and v.subject == "node"]
    if results:
        return {v.name for v in results if v.passed}
    return set(names) & RunDocuments(layout.root).names("gemm")


def dcgm_phase(
    nodes: Iterable[Node],
    outcome: BurninOutcome,
    layout: RunLayout,
    progress: Progress,
    **runners,
) -> list[DcgmRun]:
    """Run DCGM on the tested GPU nodes of a finished run and add its verdicts to the report."""
    gpu = [n for n in nodes if n.has_gpus]
    if not gpu:
        progress("DCGM: no GPU node in this run; the dcgmi diag step is skipped")
        return []
    tested = tested_nodes(outcome.report, layout, [n.name for n in gpu])
    for node in gpu:
        if node.name not in tested:
            progress(f"DCGM: {node.name} not run (it has no burn-in result)")
    level = level_for(outcome.suite.name)
    runs = run_dcgm([n for n in gpu if n.name in tested], level, layout, progress, **runners)
    add_verdicts(outcome.report, runs)
    if runs:
        progress(describe(runs))
    return runs


def describe(runs: Iterable[DcgmRun]) -> str:
    """One progress line: how many nodes ran, skipped, gave no answer."""
    runs = list(runs)
    counts = {s: sum(r.status == s for r in runs) for s in (RAN, ABSENT, NO_ANSWER)}
    return (
        f"DCGM: {counts[RAN]} node(s) ran dcgmi diag, {counts[ABSENT]} without dcgmi, "
        f"{counts[NO_ANSWER]} gave no answer"
    )


__all__ = [
    "PROBE",
    "add_recorded_verdicts",
    "add_verdicts",
    "dcgm_phase",
    "describe",
    "diag_command",
    "load_runs",
    "run_dcgm",
]
