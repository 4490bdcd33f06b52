"""Burn-in, the campaign: the workloads shipped to the nodes, run through Slurm, brought home.

    target = select_target(cluster, options)            # the suite and nodes; touches nothing
    outcome = run_burnin(cluster, target, options)      # reserve, submit, collect, judge, drain
    report = judge_run(run_dir, cluster)                # a run record judged (again)

Modules: `campaign` (the phases), `nodes` (which nodes Slurm lets run), `jobs` (the job
scripts), `ib` (InfiniBand pairs and rails), `collect` (results home over SSH), `suites`,
`workloads` (what runs on the nodes). Judging is kiln.judging's, Slurm commands kiln.slurmctl's,
the run record's files kiln.records.burnin's; `kiln burnin` installs the runtime before and
renders the reports after (kiln.commands.burnin).
"""

from __future__ import annotations

from kiln.burnin.campaign import BurninOptions, BurninOutcome, Target, run_burnin, select_target
from kiln.burnin.judge import judge_run

__all__ = [
    "BurninOptions",
    "BurninOutcome",
    "Target",
    "judge_run",
    "run_burnin",
    "select_target",
]
