"""Burn-in suites: how long each workload runs and the hard Slurm time limit of every job.

    quick     minutes, safe to run often (after a repair, before handing a node back)
    standard  the acceptance run of new hardware (about ten minutes of GEMM per node)
    soak      hours (`--hours` or kiln_burnin.soak_hours): GEMM sustained for the whole duration

The time limit is `kiln_burnin.time_limit_minutes` when the inventory sets it, else the suite's;
a soak's limit always covers its duration. A job that hits its limit is killed by Slurm and
its node has no result: a failure, never a stuck pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kiln.errors import InvalidInputError
from kiln.inventory.schema import BurninSpec

SUITES = ("quick", "standard", "soak")


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    gemm_seconds_gpu: float  # per node, every GPU at once
    gemm_seconds_cpu: float  # CPU-only nodes (FP32 on the CPU: a smoke test, not a benchmark)
    allreduce_iters: int  # timed all-reduces per message size
    time_limit_minutes: int  # hard limit of every Slurm job

    def gemm_seconds(self, gpus: bool) -> float:
        return self.gemm_seconds_gpu if gpus else self.gemm_seconds_cpu

    @property
    def ib_write_bw_seconds(self) -> int:
        """How long ib_write_bw runs per rail and pair (-D): longer suites, steadier figures."""
        return {"quick": 5, "standard": 10}.get(self.name, 30)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "gemm_seconds_gpu": self.gemm_seconds_gpu,
            "gemm_seconds_cpu": self.gemm_seconds_cpu,
            "allreduce_iters": self.allreduce_iters,
            "time_limit_minutes": self.time_limit_minutes,
        }


def resolve_suite(
    spec: BurninSpec,
    name: str | None = None,
    *,
    hours: float | None = None,
    gemm_seconds: float | None = None,
) -> Suite:
    """The suite to run: `name` or the inventory's default, with the inventory's time limit."""
    name = name or spec.suite
    if name not in SUITES:
        raise InvalidInputError(f"unknown suite {name!r}", hint=f"suites: {', '.join(SUITES)}")
    if hours is not None and name != "soak":
        raise InvalidInputError("--hours applies to the soak suite only", hint="add --suite soak")
    if name == "quick":
        suite = Suite("quick", 60.0, 10.0, 20, 10)
    elif name == "standard":
        suite = Suite("standard", 600.0, 60.0, 50, 30)
    else:
        seconds = (hours if hours is not None else spec.soak_hours) * 3600
        suite = Suite("soak", seconds, seconds, 200, math.ceil(seconds / 60) + 20)
    if gemm_seconds is not None:
        suite = Suite(suite.name, gemm_seconds, gemm_seconds, suite.allreduce_iters, 0)
        suite = _with_limit(suite, max(5, math.ceil(gemm_seconds / 60) + 5))
    if "time_limit_minutes" in spec.model_fields_set:
        suite = _with_limit(suite, spec.time_limit_minutes)
    floor = math.ceil(max(suite.gemm_seconds_gpu, suite.gemm_seconds_cpu) / 60) + 1
    return _with_limit(suite, max(suite.time_limit_minutes, floor))


def _with_limit(suite: Suite, minutes: int) -> Suite:
    return Suite(
        suite.name,
        suite.gemm_seconds_gpu,
        suite.gemm_seconds_cpu,
        suite.allreduce_iters,
        int(minutes),
    )
