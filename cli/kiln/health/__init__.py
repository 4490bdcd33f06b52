"""kiln's day-2 node health check (docs/health.md).

- `checks`: the probes' judgement, tool text and expectations in, findings out (pure);
- `decide`: the one drain/resume rule, from the findings and the node's Slurm reason (pure);
- `node`: the program Slurm runs on each compute node (HealthCheckProgram, the Prolog) and
  `kiln health` runs over SSH; stdlib and kiln.parsers only, so it runs with the node's python3;
- `clock`: the kernel clock's sync state through adjtimex(2) (time_sync without D-Bus);
- `expect`: the expectations file, from the inventory and the hardware profile (controller side,
  also the roles' filters);
- `results`: `kiln health`'s reading of the nodes' answers.

Importing this package imports nothing: the node copy holds only checks, clock, decide and
node.
"""
