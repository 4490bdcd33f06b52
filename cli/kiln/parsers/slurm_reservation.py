"""Slurm reservations: `scontrol --oneliner show reservation`, one reservation a line.

    ReservationName=kiln-burnin-x StartTime=2026-12-01T18:02:11 EndTime=... Duration=00:42:00
    Nodes=kiln-node[1-2] NodeCnt=2 ... Flags=MAINT,IGNORE_JOBS,SPEC_NODES ... Users=root ...
    State=ACTIVE ...

With no reservation at all Slurm prints "No reservations in the system" (exit 0). Values hold
no spaces except the free text of Comment= (Slurm 23.02 on), which is read to the end of the
line when it comes last and to the next `Key=` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError

_KEY = re.compile(r"(?:(?<=\s)|^)(?P<key>[A-Za-z][\w/]*)=")
NONE = "No reservations in the system"


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    nodes: str  # a Slurm hostlist, "" for none
    flags: tuple[str, ...]
    state: str  # ACTIVE or INACTIVE
    end: str | None
    fields: dict[str, str]


def _pairs(line: str) -> dict[str, str]:
    keys = list(_KEY.finditer(line))
    fields = {}
    for match, following in zip(keys, [*keys[1:], None], strict=True):
        end = following.start() if following else len(line)
        fields[match["key"]] = line[match.end() : end].strip()
    return fields


def parse_reservations(text: str) -> list[Reservation]:
    """Every reservation in `scontrol -o show reservation` output; [] when there is none."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(NONE):
            continue
        fields = _pairs(line)
        if "ReservationName" not in fields:
            raise ParseError("scontrol show reservation", f"no ReservationName in {line[:80]!r}")
        nodes = fields.get("Nodes", "")
        flags = fields.get("Flags", "")
        found.append(
            Reservation(
                name=fields["ReservationName"],
                nodes="" if nodes == "(null)" else nodes,
                flags=tuple(f for f in flags.split(",") if f and f != "(null)"),
                state=fields.get("State", ""),
                end=fields.get("EndTime"),
                fields=fields,
            )
        )
    return found
