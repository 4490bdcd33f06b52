"""What a burn-in campaign takes and gives: its options, its target and its outcome.

options = BurninOptions(suite="quick", nodes="gpu[001-040]")
target = select_target(cluster, options)      # kiln.burnin.campaign: Target(suite, nodes)
outcome = run_burnin(cluster, target, options) # BurninOutcome: the judged report, the node
                                               # states set, what was kept, skipped, undone
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.burnin import jobs as J
from kiln.burnin.suites import Suite
from kiln.judging import BurninReport


@dataclass
class BurninOptions:
    suite: str | None = None  # None: the inventory's kiln_burnin.suite
    nodes: str | None = None  # a --nodes selector; None: every compute node
    hours: float | None = None  # soak duration
    gemm_seconds: float | None = None  # override the suite's GEMM duration
    drain: bool = True  # drain failing nodes, keep passing ones resumed
    paths: J.Paths = field(default_factory=J.Paths)
    poll_seconds: float = 3.0
    wait_minutes: float | None = None  # wait up to this long for busy nodes; None: do not wait
    hold: Callable[[], None] | None = None  # raises a KilnError once the run's lock is lost


@dataclass(frozen=True)
class Target:
    """What a burn-in will run: the suite and the selected compute nodes, before Slurm is asked."""

    suite: Suite
    nodes: list[str]


@dataclass
class BurninOutcome:
    run_id: str
    run_dir: Path
    suite: Suite
    nodes: list[str]
    report: BurninReport
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it was not tested
    not_tested: dict[str, str] = field(default_factory=dict)  # busy, or ran elsewhere -> why
    drained: dict[str, str] = field(default_factory=dict)  # node -> reason kiln set
    resumed: list[str] = field(default_factory=list)  # kiln-drained nodes now in service
    # node -> the drain it was tested under, one kiln may lift (a quarantine, a failed burn-in
    # or health check); the others ran jobs before and after, so a pass leaves them in service
    # (the node lifecycle reads both)
    under_drain: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)  # changed by someone else meanwhile: now
    cleared: list[str] = field(default_factory=list)  # leftovers of killed runs, undone
    jobs: dict[str, str] = field(default_factory=dict)  # kiln job name -> Slurm job id
    timings: dict[str, float] = field(default_factory=dict)
    pair_rounds: int = 0  # rounds of the pairwise pass that ran (0: the ring was fine)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "record": str(self.run_dir),
            "suite": self.suite.to_dict(),
            "nodes": self.nodes,
            "skipped": self.skipped,
            "not_tested": self.not_tested,
            "drained": self.drained,
            "resumed": self.resumed,
            "kept": self.kept,
            "cleared": self.cleared,
            "jobs": self.jobs,
            "timings": {k: round(v, 1) for k, v in self.timings.items()},
            "passed": self.report.passed,
            "report": self.report.to_dict(),
        }
