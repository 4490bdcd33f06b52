"""Open SSH connections the way the inventory says, with host key checking always on.

One Connector per run caches what every connection shares: parsed known_hosts files, loaded
private keys, and one connection per jump host chain (its direct-tcpip channels carry every node
behind it, so 1,000 nodes behind a bastion cost one login there, not 1,000).

A connection that times out, is refused or reset, or gets no SSH banner (a node busy under
load, sshd restarting) is tried again, 3 tries in all with a backoff (1 s, then 2 s), before
the node is called unreachable. A refused login, an unknown or changed host key and an unknown
host name are answers, not accidents: never retried.
"""

from __future__ import annotations

import getpass
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import paramiko

from kiln.fleet.knownhosts import KnownHosts
from kiln.fleet.ssh import SshSettings, parse_jump

# paramiko logs every refused connection at ERROR; without a handler Python's last-resort handler
# would print those on stderr. Results carry the reasons instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


CONNECT_TRIES = 3
BACKOFF_S = (1.0, 2.0)  # the pause before the 2nd and the 3rd try
T = TypeVar("T")


def transient(error: BaseException) -> bool:
    """A fault worth another try: a timeout, a refused or reset connection, no SSH banner."""
    if isinstance(error, (paramiko.AuthenticationException, paramiko.BadHostKeyException)):
        return False
    if isinstance(error, (UnknownHostKey, JumpHostError, socket.gaierror)):
        return False
    if isinstance(error, OSError):  # TimeoutError, refused, reset, unreachable, paramiko's
        return True  # NoValidConnectionsError
    if isinstance(error, paramiko.ChannelException):  # through a jump host: 2 = connect failed
        return error.code == 2
    return isinstance(error, paramiko.SSHException) and "banner" in str(error).lower()


def with_retries(
    attempt: Callable[[], T],
    *,
    tries: int = CONNECT_TRIES,
    backoff: tuple[float, ...] = BACKOFF_S,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """`attempt()`, tried again after a transient fault (see transient), up to `tries` times."""
    for number in range(1, tries + 1):
        try:
            return attempt()
        except Exception as error:
            if number == tries or not transient(error):
                raise
            (sleep or time.sleep)(backoff[min(number - 1, len(backoff) - 1)] if backoff else 0)
    raise AssertionError("unreachable")  # pragma: no cover


class JumpHostError(Exception):
    """The jump host in front of a node could not be reached; the node is unreachable."""


def describe(error: BaseException) -> str:
    """A one-line reason for an SSH failure, host key problems spelled out."""
    if isinstance(error, paramiko.BadHostKeyException):
        return (
            f"host key mismatch for {error.hostname}: got {error.key.get_name()} "
            f"{error.key.fingerprint}, known_hosts lists {error.expected_key.fingerprint}"
        )
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = {f"port {port}: {e.strerror or e}" for (_, port, *_), e in error.errors.items()}
        return "; ".join(sorted(reasons))
    if isinstance(error, paramiko.AuthenticationException):
        return f"SSH login refused: {error}"
    return str(error) or type(error).__name__


class UnknownHostKey(paramiko.SSHException):
    """The host's key is in none of its known_hosts files."""


class _Reject(paramiko.RejectPolicy):
    """paramiko's RejectPolicy, with a message that names the key and the files searched."""

    def __init__(self, files: tuple[Path, ...]) -> None:
        self.files = files

    def missing_host_key(self, client, hostname, key) -> None:
        where = ", ".join(str(path) for path in self.files) or "no known_hosts file"
        raise UnknownHostKey(
            f"unknown host key {key.get_name()} {key.fingerprint} for {hostname}: not in "
            f"{where}; kiln never adds host keys, add it to the inventory's known_hosts"
        )


class Connector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[Path, ...], KnownHosts] = {}
        self._keys: dict[Path, paramiko.PKey] = {}
        self._jumps: dict[tuple, paramiko.SSHClient | JumpHostError] = {}
        self._jump_locks: dict[tuple, threading.Lock] = {}

    def known_hosts(self, paths: tuple[Path, ...]) -> KnownHosts:
        with self._lock:
            if paths not in self._known:
                self._known[paths] = KnownHosts.load(paths)
            return self._known[paths]

    def _pkey(self, path: Path | None) -> paramiko.PKey | None:
        if path is None:
            return None
        with self._lock:
            if path not in self._keys:
                self._keys[path] = paramiko.PKey.from_path(path)
            return self._keys[path]

    def connect(self, settings: SshSettings, timeout: float) -> paramiko.SSHClient:
        """A connected, authenticated client, transient faults tried again (with_retries);
        paramiko's exceptions pass through."""
        return with_retries(lambda: self._connect(settings, timeout))

    def _connect(self, settings: SshSettings, timeout: float) -> paramiko.SSHClient:
        sock = None
        if settings.proxy_jump:
            jump = self._jump(settings, timeout)
            target = (settings.address, settings.port)
            sock = jump.get_transport().open_channel(
                "direct-tcpip", target, ("127.0.0.1", 0), timeout=timeout
            )
        elif settings.proxy_command:
            command = settings.proxy_command.replace("%h", settings.address)
            command = command.replace("%p", str(settings.port)).replace("%r", settings.user)
            sock = paramiko.ProxyCommand(command)
        return self._login(settings, settings.address, settings.port, settings.user, sock, timeout)

    def _login(self, settings, host, port, user, sock, timeout) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        # Only the keys known_hosts lists for this host; anything else is refused, never added.
        client.set_missing_host_key_policy(_Reject(settings.known_hosts))
        name = host if port == 22 else f"[{host}]:{port}"
        for key in self.known_hosts(settings.known_hosts).lookup(name):
            client.get_host_keys().add(name, key.get_name(), key)
        pkey = self._pkey(settings.key_file)
        try:
            client.connect(
                host, port, user, pkey=pkey, sock=sock, timeout=timeout,
                banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout,
                look_for_keys=pkey is None, allow_agent=True,
            )  # fmt: skip
        except BaseException:
            client.close()
            raise
        return client

    def _jump(self, settings: SshSettings, timeout: float) -> paramiko.SSHClient:
        """The connection to the chain's last jump host: built once, shared, rebuilt if lost."""
        cache_key = (settings.proxy_jump, settings.key_file, settings.known_hosts)
        with self._lock:
            building = self._jump_locks.setdefault(cache_key, threading.Lock())
        with building:
            cached = self._jumps.get(cache_key)
            if isinstance(cached, JumpHostError):
                raise cached
            transport = cached.get_transport() if cached is not None else None
            if transport is not None and transport.is_active():
                return cached
            try:
                client = with_retries(lambda: self._chain(settings, timeout))
            except Exception as error:
                failure = JumpHostError(f"jump host {settings.proxy_jump}: {describe(error)}")
                self._jumps[cache_key] = failure
                raise failure from error
            self._jumps[cache_key] = client
            return client

    def _chain(self, settings: SshSettings, timeout: float) -> paramiko.SSHClient:
        """Log in to each jump host in turn, each through the one before it."""
        client = None
        try:
            for spec in settings.proxy_jump.split(","):
                host, port, user = parse_jump(spec.strip(), getpass.getuser())
                sock = None
                if client is not None:
                    sock = client.get_transport().open_channel(
                        "direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout
                    )
                client = self._login(settings, host, port, user, sock, timeout)
        except BaseException:
            if client is not None:
                client.close()
            raise
        return client

    def close(self) -> None:
        with self._lock:
            for client in self._jumps.values():
                if isinstance(client, paramiko.SSHClient):
                    client.close()
            self._jumps.clear()
