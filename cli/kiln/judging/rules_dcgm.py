"""DCGM diagnostics in burn-in: one `dcgmi diag` run per GPU node, judged. Skip is never Pass.

    level = DCGM_LEVELS[suite]              # quick 1, standard 2, soak 3
    verdicts = judge_dcgm(DcgmRun(node, level, "ran", output=stdout, exit_code=rc))

The run's output is read by kiln.parsers.dcgmi (the `-j` document, or the table of versions that
print one). For each node, one verdict of check `dcgm`:

- a test that failed (on any GPU) fails the node, naming the test and dcgmi's own message:
  critical, drain (`kiln: dcgm r3 memory failed on all GPUs: GPU 0 Error using CUDA API ...`);
  each GPU a failing test names gets its own GPU verdict;
- a required test of the level that was skipped or did not run leaves the node NOT VALIDATED,
  naming the tests: a warning, investigate, never a pass and never a drain (the node is not
  proven faulty; it is not proven healthy either, so the run is not a pass);
- output that cannot be read, or a dcgmi that could not run the tests, is not validated too;
- so is a test that failed while every GPU it reports passed (DCGM 4's "pcie | Fail" over
  "GPU0: Pass" rows with "There was an internal error during the test"): DCGM errored, and no
  GPU is blamed for it;
- otherwise the node passes; optional tests it skipped (EUD, pulse test, memtest: add-ons and
  SKU-dependent plugins) and warnings are named in the message.

Not run is never passed: the phase runs only on GPU nodes, so a GPU node without dcgmi
(`DcgmRun(status="absent")`), one whose nv-hostengine does not answer (dcgmi prints "Error:
unable to establish a connection to the specified host"), one whose diag errored, and one whose
dcgmi exited non-zero with no test failed is not validated, naming why. CPU-only nodes (the
sandbox) have no DCGM step at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kiln.judging._rules import DRAIN, LOOK, C, W
from kiln.judging.verdicts import Verdict, node_verdict
from kiln.parsers import ParseError
from kiln.parsers.dcgmi import DiagReport, DiagTest, parse_diag

CHECK = "dcgm"
DCGM_LEVELS = {"quick": 1, "standard": 2, "soak": 3}

# What each level must have run and passed, as DiagTest.key (one name across DCGM 3 and 4:
# "GPU Memory" and "memory" are both "memory"; every Deployment check is "software").
REQUIRED: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("software", "pcie", "memory"),
    3: ("software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power",
        "memory_bandwidth"),
}  # fmt: skip
MESSAGE_MAX = 300
RAN, ABSENT, NO_ANSWER = "ran", "absent", "no-answer"
NOT_VALIDATED = "not validated"  # how the message of a node DCGM could not validate starts
NOT_INSTALLED = "could not run: dcgmi is not installed on this GPU node (the nvidia_dcgm role)"
# What dcgmi prints when no host engine answers (DCGM's dcgmi/Command.cpp, before any
# subcommand runs; recorded in tests/fixtures/real/dcgmi-diag): the diag never started.
NO_HOSTENGINE = ("unable to establish a connection to the specified host",
                 "Unable to connect to host engine")  # fmt: skip


@dataclass(frozen=True, slots=True)
class DcgmRun:
    """What one node answered: dcgmi's stdout and exit status, or why there is none."""

    node: str
    level: int
    status: str  # ran | absent (no dcgmi on the node) | no-answer (SSH failed, timed out)
    output: str = ""
    exit_code: int | None = None
    error: str = ""  # why there is no answer, or dcgmi's stderr
    host: str | None = None  # the hostname the node reported

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> DcgmRun:
        return cls(
            node=str(doc["node"]), level=int(doc["level"]), status=str(doc["status"]),
            output=str(doc.get("output") or ""), exit_code=doc.get("exit_code"),
            error=str(doc.get("error") or ""), host=doc.get("host"),
        )  # fmt: skip


def level_for(suite: str | None) -> int:
    """The `dcgmi diag -r` level of a suite (an unknown suite gets the soak's)."""
    return DCGM_LEVELS.get(suite or "", 3)


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(test: DiagTest) -> str:
    failing = [e for e in test.entities if e.result == "Fail"]
    if failing:
        return " on " + ", ".join(f"{e.kind} {e.id}" for e in failing)
    if test.scope and test.scope.strip() == "All":
        return " on all GPUs"
    if test.scope:
        return f" on {test.scope.strip()}"
    return ""


def _names(tests: list[DiagTest]) -> str:
    return ", ".join(dict.fromkeys(t.name for t in tests))


def _not_validated(node: str, level: int, why: str) -> Verdict:
    return node_verdict(node, CHECK, False, W, LOOK, _clip(f"{NOT_VALIDATED}: dcgm r{level} {why}"))


def unvalidated_tests(report: DiagReport, level: int) -> tuple[list[DiagTest], list[str]]:
    """(required tests that were skipped or did not run, required keys with no test at all)."""
    required = REQUIRED.get(level, REQUIRED[3])
    skipped = [
        t for t in report.tests
        if t.key in required
        and (t.result not in ("Pass", "Warn", "Fail") or t.entities_with("Skip", "Not Run"))
    ]  # fmt: skip
    present = {t.key for t in report.tests}
    return skipped, [key for key in required if key not in present]


def judge_report(node: str, level: int, report: DiagReport) -> list[Verdict]:
    """The verdicts of one node's parsed dcgmi output at `level`."""
    skipped, missing = unvalidated_tests(report, level)
    gaps = []
    if skipped:
        gaps.append("skipped " + ", ".join(
            t.name + ("" if t.result == "Skip" else f" ({t.result})") for t in skipped
        ))  # fmt: skip
    if missing:
        gaps.append("did not run " + ", ".join(missing))
    # DCGM's own error is no GPU's failure: it leaves the node not validated, never drained.
    errored = [t for t in report.failed if t.errored]
    failed = [t for t in report.failed if not t.errored]
    if errored and failed:
        gaps.insert(0, f"{_names(errored)} errored")
    if failed:
        first = failed[0]
        text = f"dcgm r{level} {first.name} failed{_where(first)}"
        detail = first.warnings or first.message
        if detail:
            text += f": {detail}"
        if len(failed) > 1:
            text += f" (also failed: {_names(failed[1:])})"
        if gaps:
            text += f" (not validated: {'; '.join(gaps)})"
        verdicts = [node_verdict(node, CHECK, False, C, DRAIN, _clip(text))]
        for test in failed:
            for entity in test.entities_with("Fail"):
                if entity.kind != "GPU":
                    continue
                verdicts.append(Verdict(
                    "gpu", f"{node}/gpu{entity.id}", CHECK, False, severity=C, action=DRAIN,
                    message=_clip(f"dcgm r{level} {test.name} failed on GPU {entity.id}"),
                    node=node,
                ))  # fmt: skip
        return verdicts
    if report.runtime_error:
        return [_not_validated(node, level, f"could not run: {report.runtime_error}")]
    if errored:
        first = errored[0]
        why = f"{_names(errored)} errored with no GPU failing: {first.warnings or first.message}"
        return [_not_validated(node, level, why + (f" ({'; '.join(gaps)})" if gaps else ""))]
    if gaps:
        required = ", ".join(REQUIRED.get(level, REQUIRED[3]))
        return [_not_validated(node, level, f"{'; '.join(gaps)} (required at level {level}: "
                                            f"{required})")]  # fmt: skip
    text = f"dcgm r{level}: {len(report.tests)} test(s) passed"
    optional = [t for t in report.tests if t.result not in ("Pass", "Warn")]
    if optional:
        text += f"; optional {_names(optional)} not run"
    warned = [t for t in report.tests if t.result == "Warn"]
    if warned:
        text += f"; warnings: {'; '.join(f'{t.name}: {t.warnings or t.message}' for t in warned)}"
    return [node_verdict(node, CHECK, True, message=_clip(text))]


def no_hostengine(text: str) -> str | None:
    """dcgmi's line saying that no host engine answered, if `text` has one."""
    for line in text.splitlines():
        if any(marker.lower() in line.lower() for marker in NO_HOSTENGINE):
            return line.strip()
    return None


def judge_dcgm(run: DcgmRun) -> list[Verdict]:
    """The verdicts of one node's DCGM step (a GPU node's: only those have one)."""
    if run.status == ABSENT:
        return [_not_validated(run.node, run.level, NOT_INSTALLED)]
    if run.status != RAN:
        return [_not_validated(run.node, run.level, f"did not run: {run.error or run.status}")]
    refused = no_hostengine(run.output + "\n" + run.error)
    if refused:
        why = f"could not run: nv-hostengine does not answer (exit {run.exit_code}; {refused})"
        return [_not_validated(run.node, run.level, why + ": start nvidia-dcgm")]
    try:
        report = parse_diag(run.output)
    except ParseError as error:
        said = run.error.strip() or run.output.strip()
        why = f"printed no readable result (exit {run.exit_code}; {error}"
        return [_not_validated(run.node, run.level, why + (f"; {said}" if said else "") + ")")]
    verdicts = judge_report(run.node, run.level, report)
    if verdicts[0].passed and run.exit_code not in (0, None):
        why = f"could not run: dcgmi exited {run.exit_code} with no test failed"
        said = run.error.strip()
        return [_not_validated(run.node, run.level, why + (f" ({said})" if said else ""))]
    return verdicts
