"""`dcgmi diag -r N` (the table form).

    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | DCGM Version              | 3.3.8                                          |
    +-----  Hardware  ----------+------------------------------------------------+
    | GPU Memory                | Fail - All                                     |
    | Warning                   | GPU 0 Error using CUDA API cuInit Check DCGM   |
    |                           | and system logs for errors. Reset GPU. Restar  |

Each test row gives a result (Pass, Fail, Skip, Warn) and a scope ("All", "GPU: 0", "GPUs: 0, 1").
Rows named Info, Warning or Error belong to the test above them. dcgmi hard-wraps long text at a
fixed width, mid-word; continuation rows are joined back without inventing spaces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.parsers import ParseError

TOOL = "dcgmi diag"

_BORDER = re.compile(r"^[+|][-=+| ]*[+|]$")
_SECTION = re.compile(r"^[+|]-+\s+(?P<name>[A-Za-z][\w /]*?)\s+-+\+-+[+|]$")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|$")
_RESULT = re.compile(r"^(?P<status>Pass|Fail|Skip|Warn)(?:\s*-\s*(?P<scope>.*))?$")
_NOTE_KINDS = {"Info", "Warning", "Error"}
_METADATA_SECTIONS = {"Metadata"}


@dataclass(frozen=True, slots=True)
class DiagNote:
    kind: str  # Info, Warning or Error
    text: str

    @property
    def gpu(self) -> int | None:
        """The GPU a note is about when it starts "GPU <n> ..."."""
        match = re.match(r"GPU (\d+)\b", self.text)
        return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class DiagTest:
    section: str | None  # Deployment, Integration, Hardware, Stress
    name: str  # "GPU Memory"
    result: str  # Pass, Fail, Skip, Warn
    scope: str | None  # "All", "GPU: 0", "GPUs: 0, 1"
    notes: tuple[DiagNote, ...] = ()

    @property
    def gpus(self) -> list[int] | None:
        """GPU ids named by the scope; None for "All" or no scope."""
        if not self.scope or self.scope.strip() == "All":
            return None
        return [int(n) for n in re.findall(r"\d+", self.scope)]

    @property
    def message(self) -> str:
        """All notes, joined: the text to show next to a failure."""
        return " ".join(note.text for note in self.notes)


@dataclass(frozen=True, slots=True)
class DiagReport:
    metadata: dict[str, str]  # "DCGM Version": "3.3.8", "Driver Version Detected": ...
    tests: tuple[DiagTest, ...]
    header: tuple[str, ...] = field(default=())  # lines before the table

    @property
    def failed(self) -> list[DiagTest]:
        return [t for t in self.tests if t.result == "Fail"]

    @property
    def passed(self) -> bool:
        return not any(t.result in ("Fail", "Warn") for t in self.tests)

    def test(self, name: str) -> DiagTest:
        for test in self.tests:
            if test.name == name:
                return test
        raise KeyError(name)


@dataclass(slots=True)
class _Cell:
    section: str | None
    name: str
    chunks: list[str]


def _join(chunks: list[str]) -> str:
    # Every chunk but the last fills the column exactly; keep its spacing, trim the padding.
    if not chunks:
        return ""
    width = max(len(c) for c in chunks)
    text = "".join(c[1 : width - 2] if len(c) >= width else c[1:].rstrip() for c in chunks[:-1])
    return (text + chunks[-1][1:].rstrip()).strip()


def parse_diag(text: str) -> DiagReport:
    """Parse `dcgmi diag -r 1|2|3|4` table output."""
    header: list[str] = []
    cells: list[_Cell] = []
    section: str | None = None
    in_table = False

    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line:
            continue
        if not line.startswith(("+", "|")):
            if in_table:
                raise ParseError(TOOL, "text inside the result table", line_no=line_no, line=raw)
            header.append(line)
            continue
        in_table = True
        if match := _SECTION.match(line):
            section = match.group("name").strip()
            continue
        if _BORDER.match(line):
            continue
        match = _ROW.match(line)
        if not match:
            raise ParseError(TOOL, "malformed table row", line_no=line_no, line=raw)
        name = match.group("name").strip()
        value = match.group("value")
        if name == "Diagnostic" and value.strip() == "Result":
            continue
        if name:
            cells.append(_Cell(section, name, [value]))
        elif cells:
            cells[-1].chunks.append(value)
        else:
            raise ParseError(TOOL, "continuation row before any test", line_no=line_no, line=raw)

    if not in_table:
        raise ParseError(TOOL, "no result table found")

    metadata: dict[str, str] = {}
    tests: list[DiagTest] = []
    pending_notes: list[DiagNote] = []

    def flush() -> None:
        if tests and pending_notes:
            last = tests[-1]
            tests[-1] = DiagTest(
                last.section, last.name, last.result, last.scope, last.notes + tuple(pending_notes)
            )
        pending_notes.clear()

    for cell in cells:
        value = _join(cell.chunks)
        if cell.section in _METADATA_SECTIONS:
            metadata[cell.name] = value
            continue
        if cell.name in _NOTE_KINDS:
            if not tests:
                raise ParseError(TOOL, f"{cell.name} row before any test")
            pending_notes.append(DiagNote(cell.name, value))
            continue
        flush()
        result = _RESULT.match(value)
        if not result:
            raise ParseError(
                TOOL, f"test {cell.name!r} has no Pass/Fail/Skip/Warn result: {value!r}"
            )
        tests.append(DiagTest(cell.section, cell.name, result["status"], result["scope"]))
    flush()
    if not tests:
        raise ParseError(TOOL, "table holds no test results")
    return DiagReport(metadata=metadata, tests=tuple(tests), header=tuple(header))
