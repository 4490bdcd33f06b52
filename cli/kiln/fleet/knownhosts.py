"""known_hosts files, read once per run and indexed by host name.

paramiko's HostKeys scans every entry on each lookup; at 12,500 hosts that is quadratic, so plain
names go into a dict and only hashed (`|1|salt|hash`) entries are scanned. Marker lines
(`@cert-authority`, `@revoked`) and wildcard patterns are not honoured: a host they would cover
is unknown, and so refused.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, HostKeys, InvalidHostKey


class KnownHosts:
    def __init__(self) -> None:
        self.plain: dict[str, list[paramiko.PKey]] = {}
        self.hashed: list[tuple[str, paramiko.PKey]] = []
        self.files: list[Path] = []

    @classmethod
    def load(cls, paths: Iterable[Path]) -> KnownHosts:
        index = cls()
        for path in paths:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            index.files.append(path)
            for number, raw in enumerate(text.splitlines(), 1):
                index.add_line(raw.strip(), number)
        return index

    def add_line(self, line: str, number: int | None = None) -> None:
        if not line or line.startswith(("#", "@")):
            return
        try:
            entry = HostKeyEntry.from_line(line, number)
        except (InvalidHostKey, binascii.Error, ValueError):
            return
        if entry is None or entry.key is None:
            return
        for name in entry.hostnames:
            if name.startswith("|1|"):
                self.hashed.append((name, entry.key))
            else:
                self.plain.setdefault(name, []).append(entry.key)

    def lookup(self, name: str) -> list[paramiko.PKey]:
        """Every key listed for `name` (`host` or `[host]:port`)."""
        keys = list(self.plain.get(name, ()))
        keys += [key for hashed, key in self.hashed if HostKeys.hash_host(name, hashed) == hashed]
        return keys
