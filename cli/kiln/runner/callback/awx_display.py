"""kiln's event dispatcher: ansible-runner's awx_display, less the events kiln never reads.

ansible-runner takes its stdout callback from the directory AWX_LIB_DIRECTORY names, when set;
kiln.runner.engine points it here (local runs only: a worker controller keeps its own). This
module loads ansible-runner's own awx_display (the file KILN_RUNNER_CALLBACK names, else the
installed ansible_runner package) and subclasses it.

Every event costs the controller, per host-task: a JSON dump and a partial file written and
renamed by ansible-playbook, then read, parsed and removed by ansible-runner. ansible-runner's
callback emits two events per host-task (runner_on_start, then the result) and puts the whole
module result into each ok event; kiln's recorder (kiln.runner.events) reads only the result
event and, from an ok result, only `changed`. So here:

- runner_on_start is not emitted;
- runner_on_ok carries `res: {"changed": ...}` instead of the module's whole result (facts,
  invocation, stdout); for a task that manages a file, package or service, also the few fields
  kiln.runner.manifest reads (the record of what a stage applied: docs/scale.md, drift).

Every other event (failed, unreachable, skipped, loop items, async, play, task, no hosts
remaining, stats) keeps ansible-runner's full payload, and what is displayed
(artifacts/<ident>/stdout) does not change.

Ansible forks a worker per host-task. A worker that runs Python's cyclic garbage collector over
the heap it inherited writes to every object's header and so copies nearly every page of it:
about 30 MB private to each worker here, times forks busy at once, times shards running at once.
At each play start (after the inventory, the play and the plugins are loaded) this callback
collects once and freezes what is left (gc.freeze: Python's recipe for forking servers), so
workers leave those pages shared; KILN_GC_FREEZE=0 turns it off.
"""

from __future__ import annotations

import gc
import importlib.util
import os
from types import ModuleType

from kiln.runner.manifest import managed_action, slim


def _runner_callback() -> ModuleType:
    path = os.environ.get("KILN_RUNNER_CALLBACK")
    if path and os.path.isfile(path):
        spec = importlib.util.spec_from_file_location("kiln_runner_awx_display", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    from ansible_runner.display_callback.callback import awx_display

    return awx_display


_runner = _runner_callback()
DOCUMENTATION = _runner.DOCUMENTATION


class CallbackModule(_runner.CallbackModule):  # type: ignore[name-defined,misc]
    """awx_display with the per-host-task events kiln reads, and only what it reads of them."""

    CALLBACK_NAME = "awx_display"
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"

    def _display_only(self):  # the stdout callback ansible-runner's awx_display extends
        return super(_runner.CallbackModule, self)

    def v2_playbook_on_play_start(self, play):
        super().v2_playbook_on_play_start(play)
        if os.environ.get("KILN_GC_FREEZE", "1") != "0":
            gc.collect()
            gc.freeze()

    def v2_runner_on_start(self, host, task):
        self._display_only().v2_runner_on_start(host, task)

    def v2_runner_on_ok(self, result):
        res = {"changed": bool(result._result.get("changed", False))}
        if managed_action(getattr(result._task, "resolved_action", None) or result._task.action):
            res.update(slim(result._result), changed=res["changed"])
        event_data = {
            "host": result._host.get_name(),
            "remote_addr": result._host.address,
            "task": result._task,
            "res": res,
        }
        with self.capture_event_data("runner_on_ok", **event_data):
            self._display_only().v2_runner_on_ok(result)
