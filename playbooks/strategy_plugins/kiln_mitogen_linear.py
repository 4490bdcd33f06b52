"""mitogen's linear strategy with kiln's batched workers (kiln.strategy.batching)."""

from __future__ import annotations

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible_mitogen.strategy import StrategyMixin

from kiln.strategy.batching import BatchedQueueMixin
from kiln.strategy.mitogen_workers import MitogenBatchWorkerProcess

DOCUMENTATION = """
    name: kiln_mitogen_linear
    short_description: mitogen's linear strategy with kiln's batched workers
    description:
        - mitogen's connection layer over Ansible's linear strategy; each worker slot runs its
          share of a task's hosts in turn, over one connection to mitogen's multiplexer.
    author: kiln
"""


class StrategyModule(StrategyMixin, BatchedQueueMixin, LinearStrategyModule):
    worker_class = MitogenBatchWorkerProcess
