"""Slurm: `scontrol show node` blocks, node-oriented `sinfo` output and `sinfo -R`.

`scontrol show node` prints one block per node of `Key=Value` pairs, several per line. Values
never contain "=" followed by a key, except the free-text keys Slurm prints alone on their line
(OS, Reason, Comment, Extra), which take the rest of the line. A drain reason carries who set it
and when: `Reason=memory issues? [root@2019-01-29T10:42:12]`. Which reasons are kiln's own:
kiln.parsers.drain_reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from kiln.parsers import ParseError

_REST_OF_LINE = {"OS", "Reason", "Comment", "Extra"}
_KEY = re.compile(r"(?:(?<=\s)|^)(?P<key>[A-Za-z][\w/]*)=")
_REASON = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]\s]+)@(?P<time>[^\]]+)\]\s*$")
_GRES = re.compile(
    r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]+))?(?::(?P<count>[^:(]+))?(?:\((?P<detail>[^)]*)\))?$"
)
_SUFFIX = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}

# Base states as Slurm prints them; flags follow after "+".
_DRAIN_FLAGS = {"DRAIN", "DRAINING", "DRAINED"}


@dataclass(frozen=True, slots=True)
class Gres:
    """One generic resource: "gpu:h100:8(S:0-1)" -> name gpu, type h100, count 8, detail S:0-1."""

    name: str
    type: str | None
    count: int | None
    detail: str | None = None  # "S:0-1" (socket affinity) or "IDX:0-7" (GresUsed)


def _count(text: str) -> int | None:
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text[:-1].isdigit() and text[-1].upper() in _SUFFIX:
        return int(text[:-1]) * _SUFFIX[text[-1].upper()]
    return None


def parse_gres(text: str | None) -> list[Gres]:
    """Parse a Gres/GresUsed string: "gpu:m60:8", "gpu:quadro:1(S:0),vmem:2G", "(null)"."""
    if text is None or text.strip() in ("", "(null)", "N/A"):
        return []
    items: list[Gres] = []
    # split on commas not inside parentheses
    for part in re.split(r",(?![^()]*\))", text.strip()):
        match = _GRES.match(part.strip())
        if not match:
            raise ParseError("slurm gres", f"cannot read GRES item {part!r}")
        name, gtype, count = match["name"], match["type"], match["count"]
        if count is None and gtype is not None and _count(gtype) is not None:
            gtype, count = None, gtype  # "gpu:4": the middle field is the count
        items.append(Gres(name, gtype, _count(count) if count else 1, match["detail"]))
    return items


def gpu_count(gres: Sequence[Gres]) -> int:
    return sum(g.count or 0 for g in gres if g.name == "gpu")


@dataclass(frozen=True, slots=True)
class NodeReason:
    text: str
    user: str | None
    time: str | None  # as printed, e.g. "2019-01-29T10:42:12"


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One `scontrol show node` block. `fields` keeps every key as printed."""

    name: str
    fields: dict[str, str]
    state: str  # base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    state_flags: tuple[str, ...]  # DRAIN, MAINTENANCE, RESERVED, ...
    not_responding: bool  # the "*" suffix on the state
    reason: NodeReason | None
    gres: tuple[Gres, ...]
    gres_used: tuple[Gres, ...]
    cfg_tres: dict[str, str]
    alloc_tres: dict[str, str]

    @property
    def drain(self) -> bool:
        """Drained or draining (DRAIN flag, or the DRAINED/DRAINING base state of sinfo)."""
        return self.state in _DRAIN_FLAGS or any(f in _DRAIN_FLAGS for f in self.state_flags)

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)

    @property
    def partitions(self) -> list[str]:
        return [p for p in self.fields.get("Partitions", "").split(",") if p]


def parse_tres(text: str | None) -> dict[str, str]:
    """ "cpu=16,mem=257860M,billing=16,gres/gpu=8" -> {"cpu": "16", ...}."""
    result: dict[str, str] = {}
    for item in (text or "").split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            result[key.strip()] = value.strip()
    return result


def parse_reason(text: str | None) -> NodeReason | None:
    if text is None or not text.strip() or text.strip() in ("(null)", "none"):
        return None
    match = _REASON.match(text.strip())
    if match:
        return NodeReason(match["text"], match["user"], match["time"])
    return NodeReason(text.strip(), None, None)


def _split_state(state: str) -> tuple[str, tuple[str, ...], bool]:
    parts = state.split("+")
    base, flags = parts[0], [p for p in parts[1:] if p]
    not_responding = base.endswith("*") or any(f.endswith("*") for f in flags)
    return base.rstrip("*~#!%$@^-"), tuple(f.rstrip("*") for f in flags), not_responding


def _pairs(line: str, line_no: int) -> list[tuple[str, str]]:
    stripped = line.strip()
    matches = list(_KEY.finditer(stripped))
    if not matches or matches[0].start() != 0:
        raise ParseError("scontrol show node", "expected Key=Value", line_no=line_no, line=line)
    pairs: list[tuple[str, str]] = []
    for i, match in enumerate(matches):
        key = match["key"]
        end = matches[i + 1].start() if i + 1 < len(matches) else len(stripped)
        if key in _REST_OF_LINE:
            pairs.append((key, stripped[match.end() :].strip()))
            break
        pairs.append((key, stripped[match.end() : end].strip()))
    return pairs


def _node(fields: dict[str, str]) -> SlurmNode:
    state, flags, not_responding = _split_state(fields.get("State", "UNKNOWN"))
    return SlurmNode(
        name=fields["NodeName"],
        fields=fields,
        state=state,
        state_flags=flags,
        not_responding=not_responding,
        reason=parse_reason(fields.get("Reason")),
        gres=tuple(parse_gres(fields.get("Gres"))),
        gres_used=tuple(parse_gres(fields.get("GresUsed"))),
        cfg_tres=parse_tres(fields.get("CfgTRES")),
        alloc_tres=parse_tres(fields.get("AllocTRES")),
    )


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """Parse `scontrol show node [NAME]` (one or many blocks)."""
    nodes: list[SlurmNode] = []
    fields: dict[str, str] | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.startswith("NodeName="):
            if fields is not None:
                nodes.append(_node(fields))
            fields = {}
        elif fields is None:
            raise ParseError(
                "scontrol show node", "expected 'NodeName=' first", line_no=line_no, line=line
            )
        for key, value in _pairs(line, line_no):
            fields.setdefault(key, value)
    if fields is not None:
        nodes.append(_node(fields))
    if not nodes:
        raise ParseError("scontrol show node", "no NodeName= block")
    return nodes


# --- sinfo -----------------------------------------------------------------------------------

SINFO_FIELDS = ("node", "gres")
# `sinfo -R` ("%20E %9u %19H %N"): the reason first, and it holds spaces.
SINFO_REASON_FIELDS = ("reason", "user", "timestamp", "node")


@dataclass(frozen=True, slots=True)
class SinfoRow:
    """One node-oriented sinfo line. `values` maps the requested column names to their text."""

    values: dict[str, str]
    gres: tuple[Gres, ...] = field(default=())

    @property
    def node(self) -> str:
        return self.values["node"]

    @property
    def state(self) -> str | None:
        return self.values.get("state")

    @property
    def reason(self) -> NodeReason | None:
        if "user" in self.values or "timestamp" in self.values:  # `sinfo -R`: own columns
            text = self.values.get("reason", "").strip()
            if not text:
                return None
            return NodeReason(text, self.values.get("user"), self.values.get("timestamp"))
        return parse_reason(self.values.get("reason"))

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)


def parse_sinfo(
    text: str, fields: Sequence[str] = SINFO_FIELDS, *, sep: str | None = None
) -> list[SinfoRow]:
    """Parse node-oriented sinfo output, e.g. `sinfo -N -h -o "%N %G"` (the default fields).

    `fields` names the columns in order ("node", "gres", "state", "reason", "partition", ...).
    With `sep=None` columns are whitespace-separated and the one column that may hold spaces
    takes the slack: the reason wherever it sits (`sinfo -R` prints it first), else the last
    column; the columns after it are read from the right. Give `sep="|"` for `-o "%N|%T|%E"`
    style formats. A header line (sinfo without -h) is skipped.
    """
    if "node" not in fields:
        raise ValueError("fields must include 'node'")
    wide = fields.index("reason") if "reason" in fields else len(fields) - 1
    after = len(fields) - 1 - wide
    rows: list[SinfoRow] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if sep is None:
            cols = line.split(None, wide)
            if len(cols) > wide:  # the reason and what follows it, read from the right
                cols += cols.pop().rsplit(None, after)
        else:
            cols = [c.strip() for c in line.split(sep, len(fields) - 1)]
        if len(cols) != len(fields):
            raise ParseError(
                "sinfo", f"{len(cols)} columns, expected {len(fields)}", line_no=line_no, line=line
            )
        values = dict(zip(fields, (c.strip() for c in cols), strict=True))
        if line_no == 1 and values["node"].upper() in ("NODELIST", "HOSTNAMES", "NODE"):
            continue
        gres = tuple(parse_gres(values["gres"])) if "gres" in values else ()
        rows.append(SinfoRow(values, gres))
    if not rows:
        raise ParseError("sinfo", "no node rows")
    return rows


def parse_sinfo_reasons(text: str) -> list[SinfoRow]:
    """`sinfo -R`: one row per reason and hostlist; `row.reason` carries who set it and when."""
    return parse_sinfo(text, SINFO_REASON_FIELDS)
