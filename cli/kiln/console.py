"""The output contract: diagnostics and progress on stderr, data on stdout.

rich decides colour from the stream: plain text when stderr is not a TTY (pipelines), and
NO_COLOR is honoured by rich itself.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

JSON_SCHEMA_VERSION = 1

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


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
