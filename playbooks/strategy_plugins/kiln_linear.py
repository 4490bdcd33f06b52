"""Ansible's linear strategy with kiln's batched workers (kiln.strategy.batching)."""

from __future__ import annotations

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule

from kiln.strategy.batching import BatchedQueueMixin

DOCUMENTATION = """
    name: kiln_linear
    short_description: linear, with one forked worker per slot per task instead of per host-task
    description:
        - Ansible's linear strategy; each worker slot runs its share of a task's hosts in turn.
    author: kiln
"""


class StrategyModule(BatchedQueueMixin, LinearStrategyModule):
    pass
