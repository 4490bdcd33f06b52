"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kiln.parsers import ParseError
from kiln.parsers._common import clean, flag, integer, number

TOOL_CSV = "nvidia-smi --query-gpu"

_HEADER_CELL = re.compile(r"^[A-Za-z_][\w.]*(?: \[[^\]]+\])?$")
_HEADER_UNIT = re.compile(r"^(?P<name>.+?)\s*\[(?P<unit>[^\]]+)\]$")


@dataclass(frozen=True, slots=True)
class QueryGpuRow:
    """One GPU's row. Field names are the --query-gpu names ("power.limit"), units stripped.

    `values` maps a field to its text (None for "[N/A]", "[Not Supported]", empty and the like);
    `units` maps a field to the unit its header named ("W", "MiB", "MHz", "%").
    """

    line_no: int
    values: dict[str, str | None]
    units: dict[str, str] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def get_text(self, name: str) -> str | None:
        return self.values[name]

    def get_float(self, name: str) -> float | None:
        """ "700.00" -> 700.0; KeyError when the field was not queried."""
        return number(self.values[name])

    def get_int(self, name: str) -> int | None:
        """ "81559" or "0x0000000000000001" -> int; KeyError when the field was not queried."""
        return integer(self.values[name])

    def get_flag(self, name: str) -> bool | None:
        """Enabled/Active/Yes -> True, Disabled/Not Active/No -> False."""
        return flag(self.values[name])


def _strip_unit(value: str, unit: str | None) -> str | None:
    text = clean(value)
    if text is None:
        return None
    if unit and text.endswith(unit):
        text = text[: -len(unit)].rstrip()
    return text


def parse_query_gpu_csv(text: str, fields: Sequence[str] | None = None) -> list[QueryGpuRow]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    With a header line the columns come from it; for `noheader` output pass `fields` (the names
    given to --query-gpu, in order).
    """
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        rows = [(n, r) for n, r in enumerate(reader, start=1) if any(c.strip() for c in r)]
    except csv.Error as error:  # a stray CR, a field past the csv module's limit
        line_no = reader.line_num or None
        lines = text.splitlines()
        line = lines[line_no - 1] if line_no and line_no <= len(lines) else None
        raise ParseError(TOOL_CSV, f"not CSV: {error}", line_no=line_no, line=line) from None
    if fields is None:
        if not rows:
            raise ParseError(TOOL_CSV, "no header line")
        header_no, header = rows.pop(0)
        if not all(_HEADER_CELL.match(cell.strip()) for cell in header):
            raise ParseError(TOOL_CSV, "first line is not a --query-gpu header", line_no=header_no)
        names: list[str] = []
        units: dict[str, str] = {}
        for column in header:
            match = _HEADER_UNIT.match(column.strip())
            name = match.group("name") if match else column.strip()
            if match:
                units[name] = match.group("unit")
            names.append(name)
    else:
        names, units = [f.strip() for f in fields], {}
    lines = text.splitlines()
    result: list[QueryGpuRow] = []
    for line_no, row in rows:
        if len(row) != len(names):
            raise ParseError(
                TOOL_CSV,
                f"{len(row)} columns where the header has {len(names)}",
                line_no=line_no,
                line=lines[line_no - 1] if line_no <= len(lines) else None,
            )
        values = {
            name: _strip_unit(value, units.get(name))
            for name, value in zip(names, row, strict=True)
        }
        result.append(QueryGpuRow(line_no=line_no, values=values, units=dict(units)))
    return result
