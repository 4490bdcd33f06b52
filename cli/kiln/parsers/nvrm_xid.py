"""The NVIDIA driver's Xid lines in the kernel log (`dmesg`, `journalctl -k`).

    [Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', ..., Contained: SM
    1722468858.123456 gpu001 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=0, GPU has fallen ...

Whatever the line's prefix (dmesg -T, journalctl's formats), the Xid record is found where it
starts: the GPU's PCI address, the Xid number and the driver's text. Other kernel lines are not
Xids and are ignored; nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+),?\s*(?P<text>.*)$")


@dataclass(frozen=True)
class XidEvent:
    line_no: int
    pci: str  # 0000:00:08, as the driver prints it
    xid: int
    text: str  # the rest of the line: pid, name and the driver's words


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Every Xid record in `text`, in order."""
    events = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        match = _XID.search(line)
        if match:
            events.append(
                XidEvent(line_no, match["pci"].lower(), int(match["xid"]), match["text"].strip())
            )
    return events
