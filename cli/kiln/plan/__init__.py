"""The offline plan: stages in order, the hosts each touches, rolling batches, shards, the
cluster-wide files and the inventory exports, decided from the validated model alone.

- `make_plan(cluster, PlanOptions(...))` -> `Plan` (build.py; model.py holds the types);
- `stages`: the stage list; `shards`: how a stage's hosts split into ansible-runner processes;
- `files`: slurm.conf and the other files rendered once; `hostpattern`: `--limit` patterns.

`kiln plan` prints a Plan; `kiln provision` hands one to kiln.runner.
"""

from kiln.plan.build import make_plan
from kiln.plan.files import GeneratedFile, write_files
from kiln.plan.model import Plan, PlanOptions, Rollout, StagePlan

__all__ = [
    "GeneratedFile",
    "Plan",
    "PlanOptions",
    "Rollout",
    "StagePlan",
    "make_plan",
    "write_files",
]
