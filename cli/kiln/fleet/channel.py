"""One command on one SSH channel: read both streams until it ends or its deadline passes."""

from __future__ import annotations

import contextlib
import shlex
import threading
import time

import paramiko

MAX_OUTPUT = 1 << 20  # bytes kept per stream and node; the rest is read and dropped


class Sink:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> None:
        if self.size < MAX_OUTPUT:
            self.chunks.append(data[: MAX_OUTPUT - self.size])
        self.size += len(data)

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        return text + (f"\n[kiln: {self.size - MAX_OUTPUT} more bytes dropped]\n"
                       if self.size > MAX_OUTPUT else "")  # fmt: skip


def collect(chan: paramiko.Channel, deadline: float) -> tuple[Sink, Sink, bool]:
    """Read stdout and stderr until the command ends (False) or the deadline passes (True)."""
    out, err, wake = Sink(), Sink(), threading.Event()
    chan.in_buffer.set_event(wake)
    chan.in_stderr_buffer.set_event(wake)
    while True:
        wake.clear()
        done = chan.closed or (chan.eof_received and chan.exit_status_ready())
        while chan.recv_ready():
            out.add(chan.recv(65536))
        while chan.recv_stderr_ready():
            err.add(chan.recv_stderr(65536))
        if done:
            return out, err, False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return out, err, True
        if chan.recv_ready() or chan.recv_stderr_ready():
            continue
        # After EOF only the exit status (or the close) is left to wait for.
        (chan.status_event if chan.eof_received else wake).wait(remaining)


# sshd refuses the `signal` request when the login is root (no post-auth privilege separation)
# and closing a channel without a pty leaves its command running. So after both, a second
# session on the same connection SIGKILLs every process that inherited this connection's
# SSH_CONNECTION (its client port is unique) outside the killer's own session.
REAPER = (
    "me=$(sed 's/.*) //' /proc/$$/stat | cut -d' ' -f4); "
    'for f in $(grep -lzxF "SSH_CONNECTION=$SSH_CONNECTION" /proc/[0-9]*/environ 2>/dev/null); '
    "do d=${f%/environ}; s=$(sed 's/.*) //' $d/stat 2>/dev/null | cut -d' ' -f4); "
    '[ -n "$s" ] && [ "$s" != "$me" ] && kill -KILL ${d#/proc/} 2>/dev/null; done; true'
)


def _signal(chan: paramiko.Channel, name: str) -> None:
    """An RFC 4254 6.9 `signal` request, sent the way paramiko sends its own requests."""
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(chan.remote_chanid)
    message.add_string("signal")
    message.add_boolean(False)
    message.add_string(name)
    chan.transport._send_user_message(message)


def kill(chan: paramiko.Channel, grace: float = 5.0) -> None:
    """Kill a command still running on `chan` (best effort) and close the channel."""
    transport = chan.get_transport()
    with contextlib.suppress(Exception):  # the channel may already be gone
        _signal(chan, "KILL")
    chan.close()
    try:
        reaper = transport.open_session(timeout=grace)
        reaper.exec_command("sh -c " + shlex.quote(REAPER))
        reaper.shutdown_write()
        collect(reaper, time.monotonic() + grace)
        reaper.close()
    except Exception:  # noqa: BLE001 - the connection may be gone; nothing more to do
        pass
