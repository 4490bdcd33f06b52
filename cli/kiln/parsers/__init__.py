"""Parsers for the text that real GPU-server tools print.

One module per tool (nvidia_smi, with nvidia_smi_query and nvidia_smi_nvlink for its other
outputs; ibstat, ibnetdiscover, ib_write_bw, perfquery, nccl_tests, dcgmi, ipmitool, slurm).
Each takes the tool's output as a string, returns typed, frozen dataclasses and raises
`ParseError` (naming the tool and the line) on input it cannot read.
Parsers never run the tool: the caller gathers the output (over Ansible, from a run record or
from a file) and hands it in.
"""

from __future__ import annotations

from kiln.errors import OperationFailed


class ParseError(OperationFailed):
    """A tool printed something its parser cannot read.

    `tool` names the tool, `line_no` is 1-based (None when the problem is not tied to a line) and
    `line` is the offending text, so the message points straight at what to look at.
    """

    def __init__(
        self,
        tool: str,
        message: str,
        *,
        line_no: int | None = None,
        line: str | None = None,
    ) -> None:
        where = f" at line {line_no}" if line_no is not None else ""
        text = f"{tool}: {message}{where}"
        if line is not None:
            text += f": {line.rstrip()!r}"
        super().__init__(text)
        self.tool = tool
        self.line_no = line_no
        self.line = line


# What other packages read of the parsers' shared helpers (kiln.fabric: GUIDs, skipped lines);
# _common is the parsers' own. Imported here, after ParseError, which _common needs.
from kiln.parsers._common import SkippedLine, norm_guid  # noqa: E402

__all__ = ["ParseError", "SkippedLine", "norm_guid"]
