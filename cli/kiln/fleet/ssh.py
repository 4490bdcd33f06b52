"""SSH settings per node, read from the inventory the way Ansible's ssh connection reads them.

Ansible puts ansible_port / ansible_user / ansible_ssh_private_key_file on ssh's command line
before ansible_ssh_common_args and ansible_ssh_extra_args, and ssh keeps the first value it sees
for an option; so do we. From those args kiln takes `-o Key=Value` (also `-o Key Value`,
`-oKey=Value`), `-J`, `-i`, `-p` and `-l`. Host key checking always stays on: a
`StrictHostKeyChecking=no` in the inventory does not turn it off here.
"""

from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.errors import InvalidInputError

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
DEFAULT_CONNECT_TIMEOUT = 10.0
_FLAGS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}


@dataclass(frozen=True)
class SshSettings:
    address: str
    port: int = 22
    user: str = ""
    key_file: Path | None = None
    known_hosts: tuple[Path, ...] = ()
    proxy_jump: str | None = None  # `[user@]host[:port]`, comma-separated for a chain
    proxy_command: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def host_key_name(self) -> str:
        """The name known_hosts files the host key under: `host` or `[host]:port`."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"


def parse_ssh_args(*args: str | None) -> dict[str, str]:
    """ssh options from command-line args; keys lower-cased, the first value of each wins."""
    options: dict[str, str] = {}
    tokens = [token for arg in args if arg for token in shlex.split(str(arg))]
    index = 0
    while index < len(tokens):
        token, index = tokens[index], index + 1
        flag = token[:2]
        if flag not in ("-o", *_FLAGS):
            continue
        if len(token) > 2:
            value = token[2:]
        elif index < len(tokens):
            value, index = tokens[index], index + 1
        else:
            continue
        if flag == "-o":
            key, _, val = value.partition("=") if "=" in value else value.partition(" ")
            options.setdefault(key.strip().lower(), val.strip())
        else:
            options.setdefault(_FLAGS[flag], value)
    return options


def _paths(value: str) -> list[Path]:
    return [Path(item).expanduser() for item in value.split()]


def settings_for(name: str, address: str, hostvars: dict[str, Any]) -> SshSettings:
    """The SSH settings of one inventory host (`node.name, node.address, node.hostvars`)."""
    options = parse_ssh_args(
        hostvars.get("ansible_ssh_common_args"), hostvars.get("ansible_ssh_extra_args")
    )
    port = hostvars.get("ansible_port", hostvars.get("ansible_ssh_port")) or options.get("port")
    user = hostvars.get("ansible_user", hostvars.get("ansible_ssh_user")) or options.get("user")
    key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get("ansible_private_key_file")
    key = key or options.get("identityfile")
    timeout = hostvars.get("ansible_timeout") or options.get("connecttimeout")
    known = _paths(options.get("userknownhostsfile", " ".join(DEFAULT_KNOWN_HOSTS)))
    known += _paths(options.get("globalknownhostsfile", " ".join(DEFAULT_GLOBAL_KNOWN_HOSTS)))
    jump = options.get("proxyjump")
    try:
        return SshSettings(
            address=str(address),
            port=int(port or 22),
            user=str(user or getpass.getuser()),
            key_file=Path(str(key)).expanduser() if key else None,
            known_hosts=tuple(known),
            proxy_jump=None if jump in (None, "", "none") else jump,
            proxy_command=options.get("proxycommand") or None,
            connect_timeout=float(timeout or DEFAULT_CONNECT_TIMEOUT),
        )
    except ValueError as error:
        raise InvalidInputError(f"{name}: bad SSH setting in the inventory: {error}") from error


def parse_jump(spec: str, default_user: str) -> tuple[str, int, str]:
    """`[user@]host[:port]` (or `[user@][v6addr]:port`) -> (host, port, user)."""
    user, _, hostport = spec.rpartition("@")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = hostport.partition(":")
    return host, int(port or 22), user or default_user
