"""Batched workers over mitogen: one connection to mitogen's multiplexer per worker, not per host.

ansible_mitogen's classic worker model gives a worker process a Broker (an I/O thread) and a
UNIX-socket connection to its multiplexer when the worker first connects to a host, and shuts
both down when Ansible closes that host-task's connection (TaskExecutor.run ends with
`connection.close()`, which closes the binding). A stock worker runs one host-task, so that is
once per process. A batched worker (kiln.strategy.batching) runs several hosts in turn and would
start and join a thread and connect and handshake again for each of them.

`MitogenBatchWorkerProcess` keeps the binding open across its hosts and closes it once, when
the batch ends. Each host-task still gets and returns its own context on the node
(ContextService.get and .put), so what runs on the nodes, and every result, is unchanged
(tests/unit/test_batching.py compares them with Ansible's linear strategy).
"""

from __future__ import annotations

import ansible_mitogen.process

from kiln.strategy.batching import BatchWorkerProcess


def _keep_open() -> None:
    """Stands in for the model's on_binding_close while the batch runs."""


class MitogenBatchWorkerProcess(BatchWorkerProcess):
    """A batched worker whose mitogen binding lasts the whole batch."""

    def _run(self) -> None:
        model = ansible_mitogen.process.get_worker_model()
        if model is None or not hasattr(model, "on_binding_close"):
            super()._run()
            return
        close = model.on_binding_close
        model.on_binding_close = _keep_open  # an instance attribute: this process only
        try:
            super()._run()
        finally:
            del model.on_binding_close
            close()
