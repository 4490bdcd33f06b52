"""Where the controller's state is reached: one command per session, its stdin the channel.

The lock and the state store talk to a `Remote`: open a session running one shell command, read
its output line by line, write to its stdin, close it. `SshRemote` is the controller over kiln's
own SSH layer (kiln.fleet: the inventory's user, key, port and jump hosts, host keys checked);
`LocalRemote` runs the same command in a local `bash` (a stand-in for tests, and the shape of a
backend on a shared filesystem). Both give the remote command's stdin as the session's lifetime:
when kiln closes the session or dies, the command reads end-of-file.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Iterable
from typing import IO, Protocol

from kiln.fleet import Connector, SshSettings
from kiln.fleet.connect import describe


class RemoteUnavailable(Exception):
    """The remote could not be reached or the session could not be opened."""


class Session(Protocol):
    def readline(self, timeout: float) -> str | None:
        """The next output line without its newline; None at end of output."""
        ...

    def send(self, data: bytes) -> None: ...
    def shutdown_write(self) -> None: ...
    def close(self) -> None: ...


class Remote(Protocol):
    where: str

    def open(self, command: str) -> Session: ...
    def close(self) -> None: ...


class _Lines:
    """Lines of a byte stream, read by a daemon thread, handed out with a timeout."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Iterable[bytes]) -> None:
        try:
            for raw in stream:
                self._queue.put(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self._queue.put(None)

    def readline(self, timeout: float) -> str | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer in {timeout:g} s") from None


def run(remote: Remote, command: str, stdin: bytes = b"", timeout: float = 30.0) -> list[str]:
    """Run `command` to its end, feeding `stdin`; its output lines (stderr included)."""
    session = remote.open(command)
    try:
        if stdin:
            session.send(stdin)
        session.shutdown_write()
        lines = []
        while (line := session.readline(timeout)) is not None:
            lines.append(line)
        return lines
    finally:
        session.close()


# --- over SSH ----------------------------------------------------------------------------------


class _SshSession:
    def __init__(self, channel) -> None:
        self.channel = channel
        self._lines = _Lines(channel.makefile("rb"))

    def readline(self, timeout: float) -> str | None:
        return self._lines.readline(timeout)

    def send(self, data: bytes) -> None:
        self.channel.sendall(data)

    def shutdown_write(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.channel.shutdown_write()

    def close(self) -> None:
        self.channel.close()


class SshRemote:
    """The controller over SSH: one connection, a session per command."""

    def __init__(self, name: str, settings: SshSettings, connector: Connector | None = None):
        self.name = name
        self.settings = settings
        self.where = f"{name} ({settings.user}@{settings.address}:{settings.port})"
        self._connector = connector or Connector()
        self._client = None

    def _connect(self):
        if self._client is None:
            try:
                self._client = self._connector.connect(self.settings, self.settings.connect_timeout)
            except Exception as error:  # noqa: BLE001 - every failure is "unreachable"
                raise RemoteUnavailable(f"{self.name} unreachable: {describe(error)}") from error
            # Keepalives: a controller that vanishes is noticed instead of waited on forever.
            self._client.get_transport().set_keepalive(15)
        return self._client

    def open(self, command: str) -> Session:
        client = self._connect()
        try:
            channel = client.get_transport().open_session(timeout=self.settings.connect_timeout)
            channel.set_combine_stderr(True)
            channel.exec_command(command)
        except Exception as error:  # noqa: BLE001
            raise RemoteUnavailable(f"{self.name}: {describe(error)}") from error
        return _SshSession(channel)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._connector.close()


# --- a local stand-in ---------------------------------------------------------------------------


class _LocalSession:
    def __init__(self, command: str) -> None:
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        stdout: IO[bytes] = self.process.stdout  # type: ignore[assignment]
        self._lines = _Lines(stdout)

    def readline(self, timeout: float) -> str | None:
        return self._lines.readline(timeout)

    def send(self, data: bytes) -> None:
        stdin: IO[bytes] = self.process.stdin  # type: ignore[assignment]
        stdin.write(data)
        stdin.flush()

    def shutdown_write(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]

    def close(self) -> None:
        self.shutdown_write()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LocalRemote:
    """Commands in a local bash: the test stand-in for the controller."""

    def __init__(self, where: str = "local") -> None:
        self.where = where

    def open(self, command: str) -> Session:
        return _LocalSession(command)

    def close(self) -> None:
        pass
