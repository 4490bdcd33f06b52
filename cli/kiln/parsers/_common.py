"""Small helpers shared by the parsers (not part of the public API)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError

# Values nvidia-smi, ibstat and friends print when a field has no value on this device.
_MISSING = {
    "",
    "n/a",
    "na",
    "not supported",
    "not available",
    "unknown",
    "unknown error",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "(null)",
}

_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def missing(value: str | None) -> bool:
    """True when a tool printed a placeholder instead of a value ("N/A", "[Not Supported]", ...)."""
    if value is None:
        return True
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.strip().lower() in _MISSING


def clean(value: str | None) -> str | None:
    """The stripped text, or None for a placeholder."""
    if missing(value):
        return None
    assert value is not None
    return value.strip()


def number(value: str | None) -> float | None:
    """The leading number of "500.00 W", "27 C", "16x"; None for a placeholder or no number."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER.match(text)
    return float(match.group(0)) if match else None


def integer(value: str | None) -> int | None:
    """An integer from "4", "0x1F" or "81920 MiB"; None for a placeholder or no number."""
    text = clean(value)
    if text is None:
        return None
    if text.lower().startswith("0x"):
        try:
            return int(text, 16)
        except ValueError:
            return None
    num = number(text)
    return int(num) if num is not None else None


_TRUE = {"enabled", "active", "yes", "on", "true", "1"}
_FALSE = {"disabled", "not active", "no", "off", "false", "0"}


def flag(value: str | None) -> bool | None:
    """Enabled/Active/Yes -> True, Disabled/Not Active/No -> False, anything else None."""
    text = clean(value)
    if text is None:
        return None
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def norm_guid(value: str) -> str:
    """A GUID as 16 lower-case hex digits without 0x ("0x2C9" -> "00000000000002c9")."""
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    return text.rjust(16, "0")


# --- Lines a reader leaves out ----------------------------------------------------------------
# A capture taken with stderr folded into stdout (`ibnetdiscover > f 2>&1`, pdsh, a pasted
# terminal) carries the diagnostics that libibmad, libibumad and libibnetdisc print:
#   ibwarn: [298726] mad_rpc_open_port: client_register for mgmt 1 failed
#   ibpanic: [7851] main: stat of IB device 'mlx5_1' failed: Invalid argument
#   ibnetdiscover: iberror: failed: discover failed
#   src/query_smp.c:195; umad (DR path slid 0; dlid 0; 0,1,1,31 Attr 0x11:0) bad status 110; ...
#   /var/tmp/OFED_topdir/BUILD/rdma-core-2307mlnx47/libibnetdisc/ibnetdisc.c:802; can't open ...
_DIAGNOSTIC = re.compile(
    r"^(?:ib(?:warn|panic|error|debug|info)\b"  # libibmad's IBWARN/IBPANIC/IBERROR
    r"|[\w.-]+: ib(?:warn|panic|error)\b"  # "<tool>: iberror: failed: ..."
    r"|\S+\.c:\d+; )"  # "<source file>.c:<line>; <message>" (libibmad's IBWARN with location)
)
_FATAL = re.compile(r"\bib(?:panic|error)\b|\bfailed\b")


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line a reader left out: a diagnostic the tool printed on stderr, or text that is not
    the tool's output at all (a shell prompt, sudo's or ssh's own warnings)."""

    line_no: int  # 1-based, in the text the reader was given
    line: str
    reason: str  # "diagnostic", or "not <tool> output"

    def describe(self) -> str:
        return f"line {self.line_no} skipped ({self.reason}): {self.line.strip()!r}"


def diagnostic(line: str) -> bool:
    """True for a diagnostic line of infiniband-diags and its libraries (see above)."""
    return _DIAGNOSTIC.match(line.strip()) is not None


def skip(
    tool: str,
    skipped: list[SkippedLine],
    line_no: int,
    line: str,
    *,
    damaged: str | None = None,
) -> None:
    """Leave out a line the reader cannot read, or raise when it is the tool's own output damaged.

    `damaged`: the reader's message when the line has the shape of the tool's own output (a
    port line, a counter, a key: value) and still does not parse: a cut or garbled capture,
    where skipping would silently lose a cable or a counter.
    """
    if diagnostic(line):
        skipped.append(SkippedLine(line_no, line.rstrip(), "diagnostic"))
    elif damaged is not None:
        raise ParseError(tool, damaged, line_no=line_no, line=line)
    else:
        skipped.append(SkippedLine(line_no, line.rstrip(), f"not {tool} output"))


def nothing_usable(tool: str, what: str, skipped: list[SkippedLine]) -> ParseError:
    """The error for a capture with nothing usable: it names the line that says why, when the
    tool printed one (its last fatal diagnostic, else the first line skipped)."""
    if not skipped:
        return ParseError(tool, f"no {what} found")
    fatal = [s for s in skipped if s.reason == "diagnostic" and _FATAL.search(s.line)]
    why = fatal[-1] if fatal else skipped[0]
    return ParseError(
        tool,
        f"no {what} found; {len(skipped)} line(s) skipped, such as this {why.reason}",
        line_no=why.line_no,
        line=why.line,
    )
