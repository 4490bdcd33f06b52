"""A batched mitogen worker keeps one binding to mitogen's multiplexer for all its hosts.

Ansible closes each host-task's connection (TaskExecutor.run), and ansible_mitogen's classic
worker model then shuts its Broker thread down and drops its multiplexer connection. Inside a
batch those closes wait, and the binding is closed once when the batch ends, failing or not.
(That results stay the same as Ansible's linear strategy is tests/unit/test_batching.py's.)
"""

from __future__ import annotations

import ansible_mitogen.process
import pytest

from kiln.strategy import batching
from kiln.strategy.mitogen_workers import MitogenBatchWorkerProcess


class Model:
    """The part of ansible_mitogen's ClassicWorkerModel a worker's connection closes."""

    def __init__(self) -> None:
        self.closed = 0

    def on_binding_close(self) -> None:
        self.closed += 1


def batch_of(monkeypatch, hosts: int, model: Model, fail_at: int | None = None):
    """A worker whose batch closes the binding after each host-task, as TaskExecutor does."""
    seen: list[int] = []

    def run_hosts(self) -> None:
        for index in range(hosts):
            if index == fail_at:
                raise RuntimeError("host-task failed")
            model.on_binding_close()  # Connection.close -> ClassicBinding.close
            seen.append(model.closed)

    monkeypatch.setattr(batching.BatchWorkerProcess, "_run", run_hosts)
    monkeypatch.setattr(ansible_mitogen.process, "get_worker_model", lambda: model)
    return MitogenBatchWorkerProcess.__new__(MitogenBatchWorkerProcess), seen


def test_the_binding_is_closed_once_when_the_batch_ends(monkeypatch):
    model = Model()
    worker, seen = batch_of(monkeypatch, 4, model)
    worker._run()
    assert seen == [0, 0, 0, 0]  # no host-task closed it
    assert model.closed == 1
    assert "on_binding_close" not in vars(model)  # the model is as it was


def test_a_failing_batch_still_closes_the_binding(monkeypatch):
    model = Model()
    worker, seen = batch_of(monkeypatch, 4, model, fail_at=2)
    with pytest.raises(RuntimeError):
        worker._run()
    assert seen == [0, 0]
    assert model.closed == 1


def test_without_a_worker_model_the_batch_runs_as_it_would(monkeypatch):
    worker, seen = batch_of(monkeypatch, 2, Model())
    monkeypatch.setattr(ansible_mitogen.process, "get_worker_model", lambda: None)
    worker._run()
    assert seen == [1, 2]
