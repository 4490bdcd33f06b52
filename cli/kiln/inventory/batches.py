"""Rolling batches: the one grammar of a batch size and how Ansible's `serial` splits hosts.

`kiln_rollout.batch_size`, `--batch-size` and the plan's and runner's batch counts all read
this module, so "25%" means the same thing wherever it is written.
"""

from __future__ import annotations

import re

from kiln.errors import InvalidInputError

# A positive count, or a percentage from 1% to 100%.
BATCH_SIZE = re.compile(r"^(?:[1-9][0-9]*|(?:[1-9][0-9]?|100)%)$")


def normalize_batch_size(value: object) -> str:
    """`value` as the text Ansible's `serial` takes ("8", "25%"), or InvalidInputError."""
    text = str(value).strip().replace(" ", "")
    if not BATCH_SIZE.match(text):
        raise InvalidInputError(
            f"batch size {value!r} is neither a positive count nor a percentage (1%..100%)"
        )
    return text


def hosts_per_batch(batch_size: int | str, host_count: int) -> int:
    """Hosts in each batch, as Ansible's `serial` computes it (a percentage rounds down, min 1)."""
    if isinstance(batch_size, str) and batch_size.endswith("%"):
        size = host_count * int(batch_size[:-1]) // 100
    else:
        size = int(batch_size)
    return max(1, min(size, host_count)) if host_count else 0


def batches_needed(host_count: int, batch_size: int | str) -> int:
    """How many batches `serial` makes of `host_count` hosts."""
    size = hosts_per_batch(batch_size, host_count)
    return -(-host_count // size) if size else 0


def split_batches(hosts: list[str], batch_size: int | str) -> list[list[str]]:
    """`hosts` in the batches `serial` runs them in."""
    size = hosts_per_batch(batch_size, len(hosts))
    return [hosts[i : i + size] for i in range(0, len(hosts), size)] if size else []


def disruption_budget(batch_size: int | str, host_count: int) -> int:
    """The most nodes a stage may have out of service for its rolling changes at any moment,
    over all its shards together: the batch size, a percentage of the stage's hosts (as the
    batches). Shards run in parallel, each with batches of its own, so the slurm_maintenance
    role holds this in Slurm itself (kiln_disruption_budget; docs/operations.md)."""
    return hosts_per_batch(batch_size, host_count)
