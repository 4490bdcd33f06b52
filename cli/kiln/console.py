"""The output contract: diagnostics and progress on stderr, data on stdout.

rich decides colour from the stream: plain text when stderr is not a TTY (pipelines), and
NO_COLOR is honoured by rich itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

JSON_SCHEMA_VERSION = 1

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def print_json(kind: str, payload: dict[str, Any]) -> None:
    """Print one versioned JSON document on stdout."""
    document = {"kiln": kind, "schema_version": JSON_SCHEMA_VERSION, **payload}
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
