"""Validation findings: every problem found, with where it is and how to fix it."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from kiln.inventory.yamlfile import LocatedDict


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Origin:
    """A place in an inventory file. Line numbers start at 1; 0 means the whole file."""

    file: Path
    line: int = 0

    def display(self, root: Path | None = None) -> str:
        path = self.file
        if root is not None:
            with contextlib.suppress(ValueError):
                path = self.file.relative_to(root)
        return f"{path}:{self.line}" if self.line else str(path)

    def nested(self, value: object, loc: tuple) -> Origin:
        """The line of a nested key inside the structured value written here (`loc`: the keys
        and list indexes down to it, as pydantic reports them)."""
        line = self.line
        for part in loc:
            if isinstance(value, LocatedDict) and part in value:
                line = value.key_lines.get(part, line)
                value = value[part]
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                item = value[part]
                if isinstance(item, LocatedDict):
                    line = item.line
                value = item
            else:
                break
        return Origin(self.file, line) if line else self


@dataclass(slots=True)
class Finding:
    level: Level
    message: str
    origin: Origin | None = None
    key: str | None = None
    hint: str | None = None
    hosts: list[str] = field(default_factory=list)

    def to_dict(self, root: Path | None = None) -> dict:
        return {
            "level": str(self.level),
            "file": self.origin.display(root).rsplit(":", 1)[0] if self.origin else None,
            "line": self.origin.line if self.origin else None,
            "key": self.key,
            "message": self.message,
            "hint": self.hint,
            "hosts": self.hosts,
        }


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """A "did you mean" hint for a name that is not among `candidates`."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


class FindingCollector:
    """Collects findings, folding the same problem at the same place across many hosts.

    A bad value in group_vars/ is inherited by every host of the group; the operator wants it
    once, with the hosts it affects, not 12,500 times.
    """

    def __init__(self) -> None:
        self._by_identity: dict[tuple, Finding] = {}

    def add(
        self,
        level: Level,
        message: str,
        *,
        origin: Origin | None = None,
        key: str | None = None,
        hint: str | None = None,
        host: str | None = None,
    ) -> None:
        level = Level(level)  # a plain "error" from elsewhere (profiles) must count as one
        identity = (level, message, origin, key)
        finding = self._by_identity.get(identity)
        if finding is None:
            finding = Finding(level, message, origin, key, hint)
            self._by_identity[identity] = finding
        if host is not None:
            finding.hosts.append(host)

    def error(self, message: str, **kwargs) -> None:
        self.add(Level.ERROR, message, **kwargs)

    def warning(self, message: str, **kwargs) -> None:
        self.add(Level.WARNING, message, **kwargs)

    @property
    def findings(self) -> list[Finding]:
        def sort_key(finding: Finding) -> tuple:
            origin = finding.origin
            return (str(origin.file) if origin else "", origin.line if origin else 0)

        return sorted(self._by_identity.values(), key=sort_key)

    @property
    def has_errors(self) -> bool:
        return any(f.level is Level.ERROR for f in self._by_identity.values())
