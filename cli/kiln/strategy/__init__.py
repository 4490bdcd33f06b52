"""kiln's Ansible strategy plugins' code: Ansible's linear strategy with batched workers.

- `batching`: `BatchedQueueMixin` and `BatchWorkerProcess`, one forked worker per worker slot
  per task instead of one per host-task (see its docstring and docs/scale.md).
- `mitogen_workers`: `MitogenBatchWorkerProcess`, a batched worker that keeps its connection to
  mitogen's multiplexer across its hosts (only the kiln_mitogen_linear shim imports it).

ansible-playbook loads this through the plugin shims in playbooks/strategy_plugins/
(kiln_linear, kiln_mitogen_linear); kiln.runner only names the strategy. Core band: imports
Ansible, never kiln's services.
"""
