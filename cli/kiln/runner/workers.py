"""Worker controllers: how kiln reaches a `kiln_workers` host to run shards there.

kiln runs `ansible-runner worker` on the worker over plain `ssh`, with the SSH settings the
inventory gives that host (ansible_host, ansible_user, ansible_port,
ansible_ssh_private_key_file, ansible_ssh_common_args / ansible_ssh_extra_args) and host key
checking on (StrictHostKeyChecking=yes unless the inventory's own arguments name a known_hosts
policy). The job goes over stdin (ansible-runner transmit), events and artifacts come back over
stdout (ansible-runner process): kiln.runner.stream.run_playbook_streamed.

The worker runs it under a lease (kiln.runner.worker_side, shipped as source): kiln writes a
heartbeat every HEARTBEAT_S seconds, and a job that has not heard one for LEASE_S seconds kills
itself. A worker is lost when its stream ends before the play's recap and its command failed;
kiln then stops its job (`stop_command`) or, when the worker cannot be reached, waits out the
lease, and runs the shard on another worker (kiln.runner.execute).

The worker needs ansible-runner and ansible-core (and the collections the playbooks use) at
`kiln_rollout.worker_runner`, plus the SSH key and known_hosts the inventory names, at the same
paths, to reach the nodes of its shards.
"""

from __future__ import annotations

import os
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kiln.inventory import Node
from kiln.plan.model import Rollout
from kiln.runner import receptor, worker_side
from kiln.runner.engine import PlaybookResult

WORKER_ROOT = "/tmp/kiln-worker"  # noqa: S108 - the worker's own scratch; --delete cleans it
HEARTBEAT_S = 10.0
# Longer than ssh's own keep-alive verdict (3 x 10 s) plus a heartbeat, so a worker that kiln
# still reaches never loses its lease to a slow network.
LEASE_S = 60.0
WORKER_SIDE = Path(worker_side.__file__).read_text(encoding="utf-8")


def _expand(path: str) -> str:
    return os.path.expanduser(path)


def ssh_command(node: Node, remote_argv: list[str]) -> list[str]:
    """The argv that runs `remote_argv` on the worker `node` over ssh."""
    hostvars = node.hostvars
    address = str(hostvars.get("ansible_host") or node.address)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
    # A worker that stops answering (its machine gone, the network cut) ends the stream in
    # about 30 s instead of TCP's many minutes.
    argv += ["-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
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


def _python(runner: str) -> str:
    """The worker's Python: the one beside an absolute ansible-runner (its venv), else python3."""
    return (
        posixpath.join(posixpath.dirname(runner), "python3")
        if runner.startswith("/")
        else "python3"
    )


def runner_job(runner: str, directory: str) -> list[str]:
    """`ansible-runner worker` unpacking the job into `directory`, removed after (--delete)."""
    return [runner, "worker", "--private-data-dir", directory, "--delete"]


def worker_argv(runner: str, directory: str) -> list[str]:
    """`ansible-runner worker` reading the job on stdin, under worker_side's lease of LEASE_S."""
    job = runner_job(runner, directory)
    return [_python(runner), "-c", WORKER_SIDE, "run", str(LEASE_S), directory, "--", *job]


def stop_argv(runner: str, directory: str) -> list[str]:
    """Kill whatever still runs of the job in `directory` (a lost worker's, fenced)."""
    return [_python(runner), "-c", WORKER_SIDE, "stop", directory]


def worker_command(node: Node, runner: str, directory: str) -> list[str]:
    return ssh_command(node, worker_argv(runner, directory))


def stop_command(node: Node, runner: str, directory: str) -> list[str]:
    return ssh_command(node, stop_argv(runner, directory))


class Transport(Protocol):
    """How a worker shard's job reaches its worker (kiln_rollout.worker_transport)."""

    runner: str  # the worker's ansible-runner

    def worker_command(self, node: Node, directory: str) -> list[str]: ...

    def stop_command(self, node: Node, directory: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class SshTransport:
    runner: str

    def worker_command(self, node: Node, directory: str) -> list[str]:
        return worker_command(node, self.runner, directory)

    def stop_command(self, node: Node, directory: str) -> list[str]:
        return stop_command(node, self.runner, directory)


@dataclass(frozen=True, slots=True)
class ReceptorTransport:
    """Work units through a Receptor mesh (kiln.runner.receptor); a worker's Receptor node ID is
    its inventory name, or its `kiln_receptor_node`."""

    runner: str
    mesh: receptor.Mesh

    @staticmethod
    def node_id(node: Node) -> str:
        return str(node.hostvars.get("kiln_receptor_node") or node.name)

    def worker_command(self, node: Node, directory: str) -> list[str]:
        job = runner_job(self.runner, directory)
        return receptor.run_argv(self.mesh, self.node_id(node), LEASE_S, directory, job)

    def stop_command(self, node: Node, directory: str) -> list[str]:
        return receptor.stop_argv(self.mesh, self.node_id(node), directory)


def transport(rollout: Rollout) -> Transport:
    """The transport kiln_rollout asks for."""
    spec = rollout.receptor
    if rollout.worker_transport == "receptor" and spec is not None:
        mesh = receptor.Mesh(spec.socket, spec.ca, spec.cert, spec.key)
        return ReceptorTransport(rollout.worker_runner, mesh)
    return SshTransport(rollout.worker_runner)


def lost(result: PlaybookResult) -> bool:
    """The worker went away mid-play: its stream ended before the recap, its command failed."""
    return not result.reached_recap and result.worker_rc not in (0, None)
