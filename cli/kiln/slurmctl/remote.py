"""Run Slurm's client commands on the controller: one SSH exec through kiln.fleet per call.

`Controller.run(steps)` joins argv lists into one framed script (commands.script), runs it on
the inventory's first controller with the inventory's SSH settings (host key checking on) and
returns each step's exit code and stdout. An unreachable controller, or a step that fails, is an
OperationFailed naming the controller and the command.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln.errors import OperationFailed
from kiln.fleet import ExecResult, run_command
from kiln.inventory import Cluster, Node
from kiln.slurmctl import commands
from kiln.slurmctl.state import NodeState, from_sinfo

Runner = Callable[..., ExecResult]  # kiln.fleet.run_command's signature
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class Step:
    argv: tuple[str, ...]
    exit_code: int | None  # None: the step never ran (an earlier one stopped the script)
    stdout: str


def controller_of(cluster: Cluster) -> Node:
    controllers = cluster.controllers
    if not controllers:  # validation refuses this; kept for models built by hand
        raise OperationFailed(f"inventory {cluster.inventory_dir} has no Slurm controller")
    return controllers[0]


class Controller:
    def __init__(
        self, cluster: Cluster, *, runner: Runner = run_command, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.node = controller_of(cluster)
        self.runner = runner
        self.timeout = timeout

    @property
    def name(self) -> str:
        return self.node.name

    def run(self, steps: Sequence[Sequence[str]], *, check: bool = True) -> list[Step]:
        """Run the steps in order in one SSH exec; with `check`, a failing step raises."""
        result = self.runner([self.node], commands.script(steps), fanout=1, timeout=self.timeout)
        answer = result.results[0]
        if answer.exit_code is None:  # unreachable, host key, timeout
            why = answer.error or str(answer.status)
            raise OperationFailed(f"Slurm controller {self.name}: {answer.status}: {why}")
        framed = commands.split_steps(answer.stdout, len(steps))
        done = [Step(tuple(a), code, text) for a, (code, text) in zip(steps, framed, strict=True)]
        for step in done if check else ():
            if step.exit_code != 0:
                detail = answer.stderr.strip() or step.stdout.strip() or "no output"
                raise OperationFailed(
                    f"`{shlex.join(step.argv)}` on {self.name} exited {step.exit_code}: {detail}",
                    hint="is slurmctld up? `kiln provision INVENTORY --stages slurm` starts it",
                )
        return done

    def nodes(self) -> dict[str, NodeState]:
        """Every node Slurm knows, by name."""
        (step,) = self.run([commands.sinfo()])
        return from_sinfo(step.stdout)
