"""Small helpers shared by the parsers (not part of the public API)."""

from __future__ import annotations

import re

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
