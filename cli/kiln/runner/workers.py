"""Worker controllers: how kiln reaches a `kiln_workers` host to run shards there.

kiln runs `ansible-runner worker` on the worker over plain `ssh`, with the SSH settings the
inventory gives that host (ansible_host, ansible_user, ansible_port,
ansible_ssh_private_key_file, ansible_ssh_common_args / ansible_ssh_extra_args) and host key
checking on (StrictHostKeyChecking=yes unless the inventory's own arguments name a known_hosts
policy). The job goes over stdin (ansible-runner transmit), events and artifacts come back over
stdout (ansible-runner process): kiln.runner.engine.run_playbook_streamed.

The worker needs ansible-runner and ansible-core (and the collections the playbooks use) at
`kiln_rollout.worker_runner`, plus the SSH key and known_hosts the inventory names, at the same
paths, to reach the nodes of its shards.
"""

from __future__ import annotations

import os
import posixpath
import shlex

from kiln.inventory import Node

WORKER_ROOT = "/tmp/kiln-worker"  # noqa: S108 - the worker's own scratch; --delete cleans it


def _expand(path: str) -> str:
    return os.path.expanduser(path)


def ssh_command(node: Node, remote_argv: list[str]) -> list[str]:
    """The argv that runs `remote_argv` on the worker `node` over ssh."""
    hostvars = node.hostvars
    address = str(hostvars.get("ansible_host") or node.address)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
    extra: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if hostvars.get(key):
            extra += [_expand(arg) for arg in shlex.split(str(hostvars[key]))]
    if not any("StrictHostKeyChecking" in arg for arg in extra):
        argv += ["-o", "StrictHostKeyChecking=yes"]
    argv += extra
    key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get("ansible_private_key_file")
    if key:
        argv += ["-i", _expand(str(key))]
    port = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port")
    if port:
        argv += ["-p", str(port)]
    user = hostvars.get("ansible_user") or hostvars.get("ansible_ssh_user")
    if user:
        argv += ["-l", str(user)]
    argv += [address, "--", shlex.join(remote_argv)]
    return argv


def remote_dir(run_id: str, stage: str, shard: str) -> str:
    """Where the worker unpacks one shard's private data dir."""
    return posixpath.join(WORKER_ROOT, f"{run_id}-{stage}-{shard}")


def worker_argv(runner: str, directory: str) -> list[str]:
    """`ansible-runner worker` reading the job on stdin; --delete removes the directory after."""
    return [runner, "worker", "--private-data-dir", directory, "--delete"]


def worker_command(node: Node, runner: str, directory: str) -> list[str]:
    return ssh_command(node, worker_argv(runner, directory))
