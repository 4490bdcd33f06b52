"""`dcgmi diag -r N`: the JSON document (`-j`) of DCGM 3 and 4, and the table.

    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | DCGM Version              | 3.3.8                                          |
    +-----  Hardware  ----------+------------------------------------------------+
    | GPU Memory                | Fail - All                                     |
    | Warning                   | GPU 0 Error using CUDA API cuInit Check DCGM   |
    |                           | and system logs for errors. Reset GPU. Restar  |

Table: each test row gives a result (Pass, Fail, Skip, Warn, Not Run) and, in DCGM 3, a scope
("All", "GPU: 0"); DCGM 4 prints one continuation row per entity instead ("GPU0: Pass"). Where
DCGM 3's GPUs differ, the test spans rows, one per result ("Pass - GPUs: 0, 2, 3" then "Fail -
GPU: 1"): every row is read, each GPU it names gets its result, and the test takes the worst.
Rows named Info, Warning or Error belong to the test above them. dcgmi hard-wraps long text at a
fixed width, mid-word; continuation rows are joined back without inventing spaces.

JSON: DCGM 3 writes {"DCGM GPU Diagnostic": {"test_categories": [...]}, "version", "Driver
Version Detected", "GPU Device IDs"}, one result per GPU ("gpu_id"); DCGM 4 writes {"DCGM
Diagnostic": {"test_categories": [...]}, "metadata": {...}, "entity_groups": [...]}, one result
per entity ("entity_group", "entity_id") and a "test_summary". A run that could not start says
so in "runtime_error". Key names: NVIDIA/DCGM nvvs/include/NvvsJsonStrings.h.

Skip is never Pass: `DiagReport.passed` is true only when every test passed (or warned). A test
that failed while every GPU it reports passed is DCGM's own error (`DiagTest.errored`), not a
GPU's failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from kiln.parsers import ParseError

TOOL = "dcgmi diag"

_BORDER = re.compile(r"^[+|][-=+| ]*[+|]$")
_SECTION = re.compile(r"^[+|]-+\s+(?P<name>[A-Za-z][\w /]*?)\s+-+\+-+[+|]$")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|$")
_RESULT = re.compile(r"^(?P<status>Pass|Fail|Skip|Warn|Not Run)(?:\s*-\s*(?P<scope>.*))?$")
_ENTITY = re.compile(r"^(?P<kind>[A-Za-z]+) ?(?P<id>\d+): (?P<status>Pass|Fail|Skip|Warn|Not Run)$")
# A further result row of the test above (DCGM 3): "Fail - GPU: 1", "Pass - GPUs: 0, 2, 3".
_MORE = re.compile(r"^(?:Pass|Fail|Skip|Warn|Not Run) - GPUs?: \d+(?:, ?\d+)*,?$")
_NOTE_KINDS = {"Info", "Warning", "Error"}
_METADATA_SECTIONS = {"Metadata"}
STATUSES = ("Pass", "Fail", "Skip", "Warn", "Not Run")
# Worst first: one failing GPU fails the test; one skipped GPU leaves it unvalidated.
_RANK = {"Fail": 0, "Warn": 1, "Not Run": 2, "Skip": 3, "Pass": 4}
# Test names across DCGM versions -> one key ("GPU Memory" in 3.x is "memory" in 4.x).
_ALIASES = {"gpu_memory": "memory", "eud_test": "eud", "cpu_eud_test": "cpu_eud"}


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
class EntityResult:
    kind: str  # GPU (DCGM 4 also reports CPU, Switch, ...)
    id: int
    result: str  # Pass, Fail, Skip, Warn, Not Run


@dataclass(frozen=True, slots=True)
class DiagTest:
    section: str | None  # Deployment, Integration, Hardware, Stress
    name: str  # "GPU Memory", "memory"
    result: str  # Pass, Fail, Skip, Warn, Not Run (JSON: whatever word dcgmi printed)
    scope: str | None  # "All", "GPU: 0", "GPUs: 0, 1" (DCGM 3 tables)
    notes: tuple[DiagNote, ...] = ()
    entities: tuple[EntityResult, ...] = ()  # per-GPU results where dcgmi printed them

    @property
    def key(self) -> str:
        """The test across versions: "software" for every Deployment check, else the name
        lower-cased with underscores ("targeted_stress", "memory", "pcie")."""
        if (self.section or "").lower() == "deployment":
            return "software"
        key = re.sub(r"[\s_]+", "_", self.name.strip().lower())
        return _ALIASES.get(key, key)

    @property
    def gpus(self) -> list[int] | None:
        """GPU ids named by the scope or the entity results; None for "All" or no scope."""
        if self.entities:
            return [e.id for e in self.entities if e.kind == "GPU"]
        if not self.scope or self.scope.strip() == "All":
            return None
        return [int(n) for n in re.findall(r"\d+", self.scope)]

    def entities_with(self, *results: str) -> list[EntityResult]:
        return [e for e in self.entities if e.result in results]

    @property
    def errored(self) -> bool:
        """Failed, yet no GPU it reports failed (DCGM 4's "GPU0: Pass" rows under "pcie | Fail"
        with "There was an internal error during the test"): DCGM could not run the test, so
        nothing is known of the GPUs. Not a GPU failure, and not a pass."""
        return self.result == "Fail" and bool(self.entities) and not self.entities_with("Fail")

    @property
    def message(self) -> str:
        """All notes, joined: the text to show next to a failure."""
        return " ".join(note.text for note in self.notes)

    @property
    def warnings(self) -> str:
        return " ".join(n.text for n in self.notes if n.kind in ("Warning", "Error"))


@dataclass(frozen=True, slots=True)
class DiagReport:
    metadata: dict[str, str]  # "DCGM Version": "3.3.8", "Driver Version Detected": ...
    tests: tuple[DiagTest, ...]
    header: tuple[str, ...] = field(default=())  # lines before the table or document
    source: str = "table"  # table | json
    runtime_error: str | None = None  # the JSON's "runtime_error": dcgmi could not run the tests

    @property
    def version(self) -> str | None:
        return self.metadata.get("DCGM Version")

    @property
    def failed(self) -> list[DiagTest]:
        return [t for t in self.tests if t.result == "Fail" or t.entities_with("Fail")]

    @property
    def passed(self) -> bool:
        """Every test passed or warned, on every entity: a Skip is never a Pass."""
        return (
            bool(self.tests)
            and self.runtime_error is None
            and all(
                t.result in ("Pass", "Warn") and not t.entities_with("Fail", "Skip", "Not Run")
                for t in self.tests
            )
        )

    def test(self, name: str) -> DiagTest:
        for test in self.tests:
            if test.name == name:
                return test
        raise KeyError(name)


def parse_diag(text: str) -> DiagReport:
    """Parse `dcgmi diag` output: the JSON document when there is one, else the table."""
    if re.search(r"^\s*\{", text, re.MULTILINE):
        return parse_diag_json(text)
    return parse_diag_table(text)


# -- the table -----------------------------------------------------------------------------
@dataclass(slots=True)
class _Cell:
    section: str | None
    name: str
    chunks: list[str]
    entity: EntityResult | None = None
    more: bool = False  # a further result row of the test above ("Fail - GPU: 1")


def _join(chunks: list[str]) -> str:
    # Every chunk but the last fills the column exactly; keep its spacing, trim the padding.
    if not chunks:
        return ""
    width = max(len(c) for c in chunks)
    text = "".join(c[1 : width - 2] if len(c) >= width else c[1:].rstrip() for c in chunks[:-1])
    return (text + chunks[-1][1:].rstrip()).strip()


def _cells(text: str) -> tuple[list[str], list[_Cell]]:
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
        name, value = match.group("name").strip(), match.group("value")
        if name == "Diagnostic" and value.strip() == "Result":
            continue
        if name:
            cells.append(_Cell(section, name, [value]))
        elif _MORE.match(value.strip()) and cells and _is_test(cells[-1]):
            cells.append(_Cell(section, "", [value], more=True))
        elif entity := _ENTITY.match(value.strip()):  # DCGM 4: "GPU0: Pass" under its test
            kind, number, status = entity.group("kind", "id", "status")
            cells.append(_Cell(section, "", [], EntityResult(kind, int(number), status)))
        elif cells and cells[-1].entity is None:
            cells[-1].chunks.append(value)
        else:
            raise ParseError(TOOL, "continuation row before any test", line_no=line_no, line=raw)
    if not in_table:
        raise ParseError(TOOL, "no result table found")
    return header, cells


def _is_test(cell: _Cell) -> bool:
    """A test's result row (or a further one), not a note, metadata or an entity row."""
    if cell.more:
        return True
    return (
        bool(cell.name) and cell.name not in _NOTE_KINDS and cell.section not in _METADATA_SECTIONS
    )


def _scoped(status: str, scope: str | None) -> list[EntityResult]:
    """The GPUs a DCGM 3 scope names, each with the row's result; none for "All"."""
    if not scope or not re.match(r"GPUs?:", scope.strip()):
        return []
    return [EntityResult("GPU", int(n), status) for n in re.findall(r"\d+", scope)]


def parse_diag_table(text: str) -> DiagReport:
    """Parse the table `dcgmi diag -r 1|2|3|4` prints (DCGM 2 to 4)."""
    header, cells = _cells(text)
    metadata: dict[str, str] = {}
    tests: list[DiagTest] = []
    notes: list[DiagNote] = []
    entities: list[EntityResult] = []

    def flush() -> None:
        if tests and (notes or entities):
            last = tests[-1]
            tests[-1] = DiagTest(
                last.section, last.name, last.result, last.scope,
                last.notes + tuple(notes), last.entities + tuple(entities),
            )  # fmt: skip
        notes.clear()
        entities.clear()

    for cell in cells:
        if cell.entity is not None:
            if not tests:
                raise ParseError(TOOL, "entity result before any test")
            entities.append(cell.entity)
            continue
        value = _join(cell.chunks)
        if cell.more:  # keep every row: the worst decides the test, each GPU keeps its own
            row = _RESULT.match(value)
            if not row or not tests:
                raise ParseError(TOOL, f"unreadable result row {value!r}")
            entities.extend(_scoped(row["status"], row["scope"]))
            if _RANK[row["status"]] < _RANK.get(tests[-1].result, -1):
                tests[-1] = replace(tests[-1], result=row["status"], scope=row["scope"])
            continue
        if cell.section in _METADATA_SECTIONS:
            metadata[cell.name] = value
            continue
        if cell.name in _NOTE_KINDS:
            if not tests:
                raise ParseError(TOOL, f"{cell.name} row before any test")
            notes.append(DiagNote(cell.name, value))
            continue
        flush()
        result = _RESULT.match(value)
        if not result:
            raise ParseError(
                TOOL, f"test {cell.name!r} has no Pass/Fail/Skip/Warn result: {value!r}"
            )
        tests.append(DiagTest(cell.section, cell.name, result["status"], result["scope"]))
        entities.extend(_scoped(result["status"], result["scope"]))
    flush()
    if not tests:
        raise ParseError(TOOL, "table holds no test results")
    return DiagReport(metadata=metadata, tests=tuple(tests), header=tuple(header))


# -- the JSON document -----------------------------------------------------------------------
def _status(word: object) -> str:
    text = " ".join(str(word or "").split())
    for status in STATUSES:
        if text.lower() == status.lower():
            return status
    return text or "Not Run"  # an unknown word is kept, and never read as a Pass


def _texts(value: object) -> list[str]:
    """Warnings and info: a string, a list of strings, or a list of {"warning": ...} objects
    (DCGM 3 writes the Deployment tests' under "warnings", the others under "warning")."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("warning", item.get("warnings", ""))
        if isinstance(item, str) and item.strip():
            out.append(item.strip())
    return out


def _entities(result: dict, status: str) -> list[EntityResult]:
    if "entity_id" in result:
        return [EntityResult(str(result.get("entity_group") or "GPU"), int(result["entity_id"]),
                             status)]  # fmt: skip
    ids = result.get("gpu_id", result.get("gpu_ids"))
    if ids is None:
        return []
    return [EntityResult("GPU", int(n), status) for n in re.findall(r"\d+", str(ids))]


def _json_test(category: str | None, doc: dict) -> DiagTest:
    notes: list[DiagNote] = []
    entities: list[EntityResult] = []
    for result in doc.get("results") or []:
        status = _status(result.get("status"))
        entities += _entities(result, status)
        notes += [DiagNote("Warning", t) for t in _texts(result.get("warnings", []))]
        notes += [DiagNote("Info", t) for t in _texts(result.get("info", []))]
    summary = doc.get("test_summary") or {}
    notes += [DiagNote("Warning", t) for t in _texts(summary.get("warnings", []))]
    notes += [DiagNote("Info", t) for t in _texts(summary.get("info", []))]
    if summary.get("status"):
        result = _status(summary["status"])
    else:  # DCGM 3: the worst of the per-GPU results; none at all: it did not run
        results = [_status(r.get("status")) for r in doc.get("results") or []]
        result = min(results, key=lambda s: _RANK.get(s, -1)) if results else "Not Run"
    unique = list(dict.fromkeys(notes))
    return DiagTest(category, str(doc.get("name", "?")), result, None, tuple(unique),
                    tuple(entities))  # fmt: skip


def parse_diag_json(text: str) -> DiagReport:
    """Parse `dcgmi diag -r N -j` (DCGM 3 or 4); lines before the document are kept as header."""
    start = re.search(r"^\s*\{", text, re.MULTILINE)
    if not start:
        raise ParseError(TOOL, "no JSON document found")
    header = tuple(line for line in text[: start.start()].splitlines() if line.strip())
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start.start() :].lstrip())
    except ValueError as error:
        raise ParseError(TOOL, f"unreadable JSON document: {error}") from None
    if not isinstance(doc, dict):
        raise ParseError(TOOL, "the JSON document is not an object")
    root = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    if not isinstance(root, dict):
        raise ParseError(TOOL, "no 'DCGM Diagnostic' (4.x) or 'DCGM GPU Diagnostic' (3.x) object")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else doc
    metadata: dict[str, str] = {}
    version = meta.get("version") or root.get("version")
    if version:
        metadata["DCGM Version"] = str(version)
    if meta.get("Driver Version Detected"):
        metadata["Driver Version Detected"] = str(meta["Driver Version Detected"])
    ids = doc.get("GPU Device IDs") or [
        e.get("device_id") for g in doc.get("entity_groups") or [] if g.get("entity_group") == "GPU"
        for e in g.get("entities") or []
    ]  # fmt: skip
    if ids:
        metadata["GPU Device IDs Detected"] = ",".join(str(i) for i in ids if i)
    tests = tuple(
        _json_test(category.get("category"), test)
        for category in root.get("test_categories") or []
        for test in category.get("tests") or []
    )
    error = str(root.get("runtime_error") or "").strip() or None
    if not tests and error is None:
        raise ParseError(TOOL, "the JSON document holds no test results")
    return DiagReport(metadata, tests, header, "json", error)
