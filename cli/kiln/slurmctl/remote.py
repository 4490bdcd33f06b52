"""Run Slurm's client commands on the controller: one SSH exec through kiln.fleet per call.

`Controller.run(steps)` joins argv lists into one framed script (commands.script), runs it on
the inventory's first controller with the inventory's SSH settings (host key checking on) and
returns each step's exit code and stdout. An unreachable controller, or a step that fails, is an
OperationFailed naming the controller and the command. `nodes()` and `show(names)` are the
reading of node state (kiln.slurmctl.state); `submit(script)` is sbatch, `submit_many(scripts)`
several in one exec. With `root` (burn-in creates reservations and submits as root) the script
runs as root (kiln.fleet.as_root: through `sudo -n` unless kiln logs in as root).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln.errors import OperationFailed
from kiln.fleet import CommandOutcome, ExecResult, NodeResult, as_root, run_command
from kiln.inventory import Cluster, Node
from kiln.parsers.slurm import parse_scontrol_nodes
from kiln.slurmctl import commands
from kiln.slurmctl.state import NodeState, from_scontrol, from_sinfo, split_not_found

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
        self,
        cluster: Cluster,
        *,
        runner: Runner = run_command,
        timeout: float = DEFAULT_TIMEOUT,
        root: bool = False,
    ) -> None:
        self.node = controller_of(cluster)
        self.runner = runner
        self.timeout = timeout
        self.root = root
        self.stderr = ""  # the last run's stderr (Slurm's error messages)

    @property
    def name(self) -> str:
        return self.node.name

    def _exec(self, text: str, timeout: float | None = None) -> NodeResult:
        command = as_root(self.node, text) if self.root else text
        limit = timeout or self.timeout
        return self.runner([self.node], command, fanout=1, timeout=limit).results[0]

    def shell(self, text: str, what: str, *, timeout: float | None = None) -> str:
        """Run a shell program on the controller (kiln.slurmctl.cas); its stdout, whatever its
        exit code. OperationFailed when the controller was not reached or did not finish."""
        answer = self._exec(text, timeout)
        if answer.exit_code is None:
            why = answer.error or str(answer.status)
            raise OperationFailed(f"{what} on {self.name}: {answer.status}: {why}")
        self.stderr = answer.stderr.strip()
        return answer.stdout

    def run(self, steps: Sequence[Sequence[str]], *, check: bool = True) -> list[Step]:
        """Run the steps in order in one SSH exec; with `check`, a failing step raises. An
        unreachable controller raises either way."""
        answer = self._exec(commands.script(steps))
        if answer.exit_code is None:  # unreachable, host key, timeout
            why = answer.error or str(answer.status)
            raise OperationFailed(f"Slurm controller {self.name}: {answer.status}: {why}")
        framed = commands.split_steps(answer.stdout, len(steps))
        done = [Step(tuple(a), code, text) for a, (code, text) in zip(steps, framed, strict=True)]
        self.stderr = answer.stderr.strip()
        for step in done if check else ():
            if step.exit_code != 0:
                raise self.failure(step)
        return done

    def failure(self, step: Step) -> OperationFailed:
        """The error for a failed step, in Slurm's own words (its stderr, else its output)."""
        detail = self.stderr or step.stdout.strip() or "no output"
        return OperationFailed(
            f"`{shlex.join(step.argv)}` on {self.name} exited {step.exit_code}: {detail}",
            hint="is slurmctld up? `kiln provision INVENTORY --stages slurm` starts it",
        )

    def nodes(self) -> dict[str, NodeState]:
        """Every node Slurm knows, by name."""
        (step,) = self.run([commands.sinfo()])
        return from_sinfo(step.stdout)

    def show(self, names: Sequence[str]) -> dict[str, NodeState]:
        """These nodes as `scontrol show node` shows them, by name. Names Slurm says it does not
        know ("Node X not found") are left out; any other failure (slurmctld down, no answer)
        is an OperationFailed in Slurm's words, never "not in Slurm". ParseError when the
        answer cannot be read."""
        (step,) = self.run([commands.show_nodes(names)], check=False)
        shown, missing = split_not_found(step.stdout)
        if step.exit_code != 0 and not missing:
            raise self.failure(step)
        if not shown.strip():
            return {}
        return {node.name: from_scontrol(node) for node in parse_scontrol_nodes(shown)}

    def submit(self, script: str, what: str) -> str:
        """sbatch the job script; its job id. `what` names the job in errors."""
        answer = self._exec(commands.sbatch(script))
        if answer.status is not CommandOutcome.OK:
            detail = (answer.stderr or answer.stdout or answer.error or "").strip()
            raise OperationFailed(f"sbatch of {what} on {self.name}: {answer.status}: {detail}")
        job = commands.job_id(answer.stdout)
        if job is None:
            lines = answer.stdout.strip().splitlines()
            raise OperationFailed(f"sbatch of {what} printed no job id: {lines!r}")
        return job

    def submit_many(self, scripts: Sequence[str], what: str) -> tuple[list[str | None], str]:
        """sbatch several job scripts in one SSH exec (keep a call to a few dozen): each one's
        job id (None where sbatch refused it) and sbatch's stderr; OperationFailed when the
        controller is not reached (then nothing is known to be submitted)."""
        if not scripts:
            return [], ""
        answer = self._exec(commands.sbatch_many(scripts))
        if answer.exit_code is None:
            why = answer.error or str(answer.status)
            raise OperationFailed(f"sbatch of {what} on {self.name}: {answer.status}: {why}")
        framed = commands.split_steps(answer.stdout, len(scripts))
        ids = [commands.job_id(text) if code == 0 else None for code, text in framed]
        return ids, answer.stderr.strip()
