"""The output contract: diagnostics and progress on stderr, data on stdout.

rich decides colour from the stream: plain text when stderr is not a TTY (pipelines), and
NO_COLOR is honoured by rich itself. Off a terminal (a pipe, a log, CI) the page is
OFF_TERMINAL_WIDTH wide unless COLUMNS says otherwise, so tables never cut a host name to fit
80 columns; on a terminal `folded` tables wrap a long cell over lines instead of cutting it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:  # rich.table loads on the first table, not on the path of `kiln --help`
    from rich.table import Table

JSON_SCHEMA_VERSION = 1
OFF_TERMINAL_WIDTH = 200
NAME_COLUMNS = {"host", "node", "name"}  # never narrower than their longest cell (up to 64)


def page_width(stream: IO[str]) -> int | None:
    """None (rich asks the terminal) on a terminal or where COLUMNS is set; wide otherwise."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty or os.environ.get("COLUMNS") else OFF_TERMINAL_WIDTH


err = Console(stderr=True, highlight=False, soft_wrap=True, width=page_width(sys.stderr))
out = Console(highlight=False, soft_wrap=True, width=page_width(sys.stdout))


def folded(table: Table) -> Table:
    """The table with every column folding a long cell over lines instead of cutting it, and
    name columns (host, node, name) as wide as their longest name."""
    from rich.text import Text

    for column in table.columns:
        column.overflow, column.no_wrap = "fold", False
        if str(column.header).lower() in NAME_COLUMNS:
            cells = [c if isinstance(c, Text) else Text.from_markup(str(c)) for c in column.cells]
            column.min_width = min(64, max((c.cell_len for c in cells), default=0)) or None
    return table


# ANSI/VT escape sequences (CSI such as colours and cursor moves, OSC such as window titles and
# hyperlinks, and two-byte ESC sequences): what a remote tool's output may carry.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# Every other C0/C1 control character but tab and newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """Text from a node, a tool or a file, safe for a terminal: ANSI escape sequences removed,
    any other control character shown as `\\xNN` (a bare ESC, a carriage return, a bell)."""
    plain = _ANSI.sub("", str(text).replace("\r\n", "\n"))
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", plain)


def safe(text: object) -> str:
    """Outside text (host output, error messages, drain reasons, file contents) for a rich
    f-string: cleaned, and its `[...]` escaped so rich prints it as data, never as markup."""
    return escape(clean(text))


def print_json(kind: str, payload: dict[str, Any]) -> None:
    """Print one versioned JSON document on stdout."""
    document = {"kiln": kind, "schema_version": JSON_SCHEMA_VERSION, **payload}
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
