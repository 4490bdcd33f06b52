"""The stored fabric capture of `kiln_slurm.topology: fabric`, read and parsed once.

Validation judges it (kiln.inventory.rules.fabric) and the Cluster keeps the parsed fabric,
so rendering topology.conf (kiln.fabric.topology) never reads or parses it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kiln.parsers import ParseError
from kiln.parsers.ibnetdiscover import IbFabric, parse_ibnetdiscover


@dataclass(frozen=True, slots=True)
class FabricCapture:
    name: str  # as written in kiln_slurm.ibnetdiscover_file
    path: Path
    fabric: IbFabric | None = None  # None when it could not be read or parsed
    unreadable: str | None = None  # why the file could not be read
    parse_error: ParseError | None = None


def read_capture(name: str, inventory_dir: Path) -> FabricCapture:
    """The capture `name` (absolute, or relative to the inventory directory), parsed."""
    path = Path(name) if Path(name).is_absolute() else inventory_dir / name
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = getattr(error, "strerror", None) or str(error)
        return FabricCapture(name, path, unreadable=why)
    try:
        return FabricCapture(name, path, fabric=parse_ibnetdiscover(text))
    except ParseError as error:
        return FabricCapture(name, path, parse_error=error)
