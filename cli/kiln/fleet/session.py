"""One command on one node through fabric, over the SSH client kiln connected.

kiln.fleet.connect opens and authenticates the client (host keys checked against the
inventory's known_hosts, never added; jump hosts; retries). A fabric.Connection is then put
over that very client, so fabric never opens a connection of its own (its default policy would
add unknown host keys), and the command runs through fabric's Remote runner with kiln's rules:

- no pty, no local stdin: the remote stdin is at EOF at once (a command reading it ends);
- at most MAX_OUTPUT bytes kept per stream, the rest read and dropped, decoded once at the end
  (a UTF-8 character split between two reads stays whole);
- the deadline kills the command: the SSH `signal`, then the reaper session
  (kiln.fleet.channel.kill), and the node is reported timed out with what it printed so far;
- the wait blocks on the channel's status event instead of polling every 10 ms.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import paramiko
from fabric import Config, Connection
from fabric.runners import Remote
from invoke.exceptions import CommandTimedOut

from kiln.fleet.channel import Sink, kill
from kiln.fleet.ssh import SshSettings

READ_SIZE = 65536


class KilnRemote(Remote):
    """fabric's Remote runner with kiln's output cap, kill and wait (see the module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.killed = threading.Event()
        self.kill_done = threading.Event()

    def start(self, command, shell, env, timeout=None) -> None:
        super().start(command, shell, env, timeout)
        self.channel.shutdown_write()  # stdin at EOF: a command reading it does not wait forever

    def handle_stdout(self, buffer_, hide, output) -> None:
        self._drain(buffer_, self.read_proc_stdout)

    def handle_stderr(self, buffer_, hide, output) -> None:
        self._drain(buffer_, self.read_proc_stderr)

    def _drain(self, buffer_: list[str], reader) -> None:
        sink = Sink()
        try:
            while data := reader(READ_SIZE):
                sink.add(data)
        finally:
            buffer_.append(sink.text())

    def wait(self) -> None:
        while not (self.process_is_finished or self.has_dead_threads):
            self.channel.status_event.wait(0.1)

    def kill(self) -> None:
        self.killed.set()
        try:
            kill(self.channel)
        finally:
            self.kill_done.set()


@dataclass
class Outcome:
    exit_code: int  # -1: no exit status (killed by a signal, or the connection dropped)
    stdout: str
    stderr: str
    timed_out: bool


def connection(settings: SshSettings, client: paramiko.SSHClient) -> Connection:
    """A fabric Connection over `client`, already connected and authenticated by kiln."""
    conn = Connection(
        settings.address, user=settings.user, port=settings.port, config=fabric_config(),
        connect_timeout=settings.connect_timeout,
    )  # fmt: skip
    conn.client = client  # fabric's own client (AutoAddPolicy) is never connected
    conn.transport = client.get_transport()
    if not conn.is_connected:
        raise paramiko.SSHException("the connection closed before the command started")
    return conn


def fabric_config() -> Config:
    """A fabric Config for one connection (a Config shared between threads is not safe: it
    re-merges itself on access): no ssh_config or fabric.yml files read (the inventory is the
    source), the KilnRemote runner, output hidden, no local stdin, no exception for exit != 0."""
    return Config(
        lazy=True,
        overrides={
            "load_ssh_configs": False,
            "runners": {"remote": KilnRemote},
            "run": {"hide": True, "warn": True, "in_stream": False, "pty": False},
        },
    )


def run_on(conn: Connection, command: str, timeout: float) -> Outcome:
    """Run `command` as given (no prefix, no cd, no env) on `conn`, killed after `timeout` s."""
    runner = KilnRemote(context=conn, inline_env=True)
    try:
        result = runner.run(command, timeout=timeout)
    except CommandTimedOut as timed_out:
        result = timed_out.result
    if runner.killed.is_set():
        runner.kill_done.wait()  # the reaper has run before the node is reported
        return Outcome(-1, result.stdout, result.stderr, timed_out=True)
    return Outcome(result.exited, result.stdout, result.stderr, timed_out=False)
