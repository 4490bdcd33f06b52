"""Run one command on many nodes over SSH in parallel, each node bounded by a deadline.

Each node gets a worker from a bounded pool (`fanout`). kiln.fleet.connect connects it (host
keys checked, retries); the command runs through fabric over that connection
(kiln.fleet.session). Connecting is bounded by the node's connect timeout
(ansible_timeout or ConnectTimeout, default 10 s), the command by `timeout`
seconds from its start, as pdsh -u and clush -u do. A command still running then is killed
(kiln.fleet.channel.kill) and its channel closed; the node is reported `timeout` with what it
printed so far. A node that cannot be reached or logged into is
`unreachable`; one whose host key is unknown or different is `hostkey`. The command string goes
to the remote shell exactly as given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import paramiko

from kiln.fleet.connect import Connector, UnknownHostKey, describe
from kiln.fleet.session import connection, run_on
from kiln.fleet.ssh import SshSettings, settings_for
from kiln.inventory import Node


class CommandOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    HOSTKEY = "hostkey"


@dataclass
class NodeResult:
    name: str
    address: str
    status: CommandOutcome
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "status": str(self.status), "duration": round(self.duration, 3)}


@dataclass
class ExecResult:
    command: str
    results: list[NodeResult]  # in the order the nodes were given (inventory order)
    duration: float
    fanout: int
    timeout: float
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = {str(s): sum(r.status is s for r in self.results) for s in CommandOutcome}

    @property
    def ok(self) -> bool:
        return all(result.status is CommandOutcome.OK for result in self.results)


def _run_one(
    node: Node, settings: SshSettings, command: str, timeout: float, connector: Connector,
    active: set[paramiko.SSHClient], stop: threading.Event,
) -> NodeResult:  # fmt: skip
    start = time.monotonic()

    def result(status: CommandOutcome, **fields) -> NodeResult:
        elapsed = time.monotonic() - start
        return NodeResult(node.name, settings.address, status, duration=elapsed, **fields)

    if stop.is_set():
        return result(CommandOutcome.UNREACHABLE, error="interrupted before it started")
    try:
        client = connector.connect(settings, settings.connect_timeout)
    except (paramiko.BadHostKeyException, UnknownHostKey) as error:
        return result(CommandOutcome.HOSTKEY, error=describe(error))
    except TimeoutError:
        wait = settings.connect_timeout
        return result(CommandOutcome.UNREACHABLE, error=f"no SSH answer within {wait:g}s")
    except Exception as error:  # noqa: BLE001 - socket, auth, protocol and jump host errors
        return result(CommandOutcome.UNREACHABLE, error=describe(error))
    active.add(client)
    try:
        outcome = run_on(connection(settings, client), command, timeout)
        out, err = outcome.stdout, outcome.stderr
        if outcome.timed_out:
            return result(
                CommandOutcome.TIMEOUT, stdout=out, stderr=err,
                error=f"still running after {timeout:g}s: killed",
            )  # fmt: skip
        if outcome.exit_code == -1:  # no exit-status: killed by a signal, or the link dropped
            return result(CommandOutcome.FAILED, stdout=out, stderr=err,
                          error="no exit status (killed by a signal?)")  # fmt: skip
        status = CommandOutcome.OK if outcome.exit_code == 0 else CommandOutcome.FAILED
        return result(status, exit_code=outcome.exit_code, stdout=out, stderr=err)
    except Exception as error:  # noqa: BLE001 - the connection broke mid-command
        return result(CommandOutcome.UNREACHABLE, error=f"connection lost: {describe(error)}")
    finally:
        active.discard(client)
        client.close()


def run_command(
    nodes: Sequence[Node],
    command: str,
    *,
    fanout: int = 64,
    timeout: float = 60.0,
    on_result: Callable[[NodeResult], None] | None = None,
    connector: Connector | None = None,
) -> ExecResult:
    """Run `command` on every node, at most `fanout` at once; `on_result` is called as each
    node finishes, from the calling thread. Ctrl-C closes every open connection and re-raises."""
    settings = [settings_for(node.name, node.address, node.hostvars) for node in nodes]
    connector = connector or Connector()
    active: set[paramiko.SSHClient] = set()
    stop = threading.Event()
    results: list[NodeResult | None] = [None] * len(nodes)
    start = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=max(1, min(fanout, len(nodes))))
    try:
        futures = {
            pool.submit(_run_one, node, ssh, command, timeout, connector, active, stop): index
            for index, (node, ssh) in enumerate(zip(nodes, settings, strict=True))
        }
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_result is not None:
                on_result(future.result())
    except BaseException:
        stop.set()
        for client in active.copy():  # closing their channels wakes every worker up
            client.close()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=False)
        connector.close()
    done = [result for result in results if result is not None]
    return ExecResult(command, done, time.monotonic() - start, fanout, timeout)
