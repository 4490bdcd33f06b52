"""Batched workers for Ansible's linear strategy: one forked worker per slot per task, not per host.

Stock Ansible forks a worker process for every host-task. On the controller that fork, and Jinja
compiling the task's templates again in every fresh child, are most of a host-task's cost (about
two thirds measured here, see docs/scale.md). `BatchedQueueMixin` keeps the linear strategy's
order, results, callbacks, failure rules and concurrency and changes one thing: the hosts of a
task are split into one run of hosts per worker slot (`forks`, or fewer where the task's
`throttle` says so), and each slot's `BatchWorkerProcess` runs its hosts one after the other,
sending each host's result as soon as it has it.

Concurrency is unchanged: with 100 hosts and 25 forks stock Ansible runs 25 host-tasks at a
time, and so does this (25 workers of 4 hosts each). A worker gives each host a fresh copy of the
task and play context (`Task.copy`, as Ansible's own loops do), since running a task changes them.

ansible-playbook loads this through the strategy plugin shims in playbooks/strategy_plugins/
(kiln_linear, and kiln_mitogen_linear with mitogen's mixin); kiln.runner.engine names one.
"""

from __future__ import annotations

import math
import time

from ansible import context
from ansible._internal import _task
from ansible._internal._templating._engine import TemplateEngine
from ansible.errors import AnsibleError
from ansible.executor.process.worker import WorkerProcess
from ansible.plugins import loader as plugin_loader
from ansible.utils.display import Display

display = Display()


Job = tuple  # (host, task, task_vars, play_context), as StrategyBase._queue_task receives them


class BatchWorkerProcess(WorkerProcess):
    """A forked worker that runs one task on several hosts, one after the other."""

    def __init__(self, *, jobs: list[Job], **kwargs) -> None:
        host, task, task_vars, play_context = jobs[0]
        super().__init__(
            host=host, task=task, task_vars=task_vars, play_context=play_context, **kwargs
        )
        self._jobs = jobs

    def _run(self) -> None:
        # Running a task changes its Task and PlayContext objects (templated fields, delegation),
        # and its parent blocks' (Task.post_validate templates them too), so every host after
        # the first gets copies of all three, taken before the first one runs. Not of the
        # blocks' task lists (exclude_tasks; Ansible's own loops leave them out too): a plain copy()
        # duplicates every task of the enclosing block for every host, which was a sixth of a
        # worker's CPU on an 8-task play and grows with the block.
        fresh = [
            (task.copy(exclude_tasks=True), play_context.copy())
            for _, task, _, play_context in self._jobs[1:]
        ]
        for index, (host, task, task_vars, play_context) in enumerate(self._jobs):
            if index:
                task, play_context = fresh[index - 1]
            self._host, self._task = host, task
            self._task_vars, self._play_context = task_vars, play_context
            with _task.TaskContext(task):
                super()._run()  # runs the task and sends this host's result
            self._jobs[index] = None  # this host's variables can go


class BatchedQueueMixin:
    """The strategy half: hold a task's hosts until a run for one worker slot is full.

    Mixed in before Ansible's linear StrategyModule. Queued host-tasks count as pending at once,
    so the linear strategy always waits for them, and waiting starts what is still held.
    """

    # The worker a slot runs: mitogen's variant keeps its connection across the hosts
    # (kiln.strategy.mitogen_workers).
    worker_class: type[BatchWorkerProcess] = BatchWorkerProcess

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[Job] = []
        self._slots = 1  # worker slots of the held hosts' task
        self._run_length = 1
        self._round_size = 1

    def _get_next_task_lockstep(self, hosts, iterator):
        host_tasks = super()._get_next_task_lockstep(hosts, iterator)
        self._round_size = max(1, len(host_tasks))
        return host_tasks

    def _queue_task(self, host, task, task_vars, play_context):
        if self._held and self._held[0][1]._uuid != task._uuid:
            self._start_held()
        if not self._held:
            self._slots = self._worker_slots(task, task_vars)
            self._run_length = math.ceil(self._round_size / self._slots)
        self._held.append((host, task, task_vars, play_context))
        self._pending_results += 1
        if len(self._held) >= self._run_length:
            self._start_held()

    def _wait_on_pending_results(self, iterator):
        self._start_held()
        return super()._wait_on_pending_results(iterator)

    def _worker_slots(self, task, task_vars) -> int:
        """Worker slots this task may use: forks, or fewer where its throttle says so."""
        slots = len(self._workers)
        templar = TemplateEngine(loader=self._loader, variables=task_vars)
        try:
            throttle = int(templar.template(task.throttle))
        except Exception as ex:
            message = "Failed to convert the throttle value to an integer."
            raise AnsibleError(message, obj=task.throttle) from ex
        if throttle > 0 and self.ALLOW_BASE_THROTTLING and not task.run_once:
            slots = min(slots, throttle)
        return max(1, slots)

    def _start_held(self) -> None:
        jobs, self._held = self._held, []
        if not jobs:
            return
        try:
            slot = self._free_slot(self._slots)
            for host, task, task_vars, play_context in jobs:
                self._queued_task_cache[(host.name, task._uuid)] = {
                    "host": host,
                    "task": task,
                    "task_vars": task_vars,
                    "play_context": play_context,
                }
                self._tqm.send_callback("v2_runner_on_start", host, task)
            worker = self.worker_class(
                jobs=jobs,
                final_q=self._final_q,
                loader=self._loader,
                variable_manager=self._variable_manager,
                shared_loader_obj=plugin_loader.get_plugin_loader_namespace(),
                worker_id=slot,
                cliargs=context.CLIARGS,
            )
            self._workers[slot] = worker
            worker.start()
        except (EOFError, OSError, AssertionError) as ex:
            # Most likely an abort, as in StrategyBase._queue_task: these results never come.
            self._pending_results -= len(jobs)
            display.debug(f"got an error while queuing: {ex}")

    def _free_slot(self, slots: int) -> int:
        """The first of the first `slots` worker slots whose worker has exited (waits for one)."""
        while True:
            for index in range(slots):
                worker = self._workers[index]
                if worker is None or not worker.is_alive():
                    if worker:
                        worker.close()
                    return index
            time.sleep(0.0001)
