"""Debian package versions compared as dpkg compares them (deb-version(7)).

    compare("1:2.0-1", "2.1-1") > 0        # the epoch wins
    compare("2.25.1-1+cuda12.8", "2.25.1-1+cuda12.9") < 0
    compare("1.0~rc1", "1.0") < 0          # a tilde sorts before everything, even the end

A version is [epoch:]upstream[-revision]; each part is compared as alternating runs of
non-digits (letters before non-letters, `~` before all, the end after `~`) and numbers.
"""

from __future__ import annotations

import functools
import re


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def _order(c: str) -> int:
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_text(a: str, b: str) -> int:
    """Two runs of non-digits, character by character (the end sorts after `~` only)."""
    for i in range(max(len(a), len(b))):
        x = _order(a[i]) if i < len(a) else 0
        y = _order(b[i]) if i < len(b) else 0
        if x != y:
            return -1 if x < y else 1
    return 0


def _compare_part(a: str, b: str) -> int:
    while a or b:
        text_a = re.match(r"\D*", a).group()  # type: ignore[union-attr]
        text_b = re.match(r"\D*", b).group()  # type: ignore[union-attr]
        if (result := _compare_text(text_a, text_b)) != 0:
            return result
        a, b = a[len(text_a) :], b[len(text_b) :]
        digits_a = re.match(r"\d*", a).group()  # type: ignore[union-attr]
        digits_b = re.match(r"\d*", b).group()  # type: ignore[union-attr]
        x, y = int(digits_a or 0), int(digits_b or 0)
        if x != y:
            return -1 if x < y else 1
        a, b = a[len(digits_a) :], b[len(digits_b) :]
    return 0


def compare(a: str, b: str) -> int:
    """<0, 0 or >0 as version `a` is older than, the same as or newer than `b`."""
    epoch_a, upstream_a, revision_a = _split(a)
    epoch_b, upstream_b, revision_b = _split(b)
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return _compare_part(upstream_a, upstream_b) or _compare_part(revision_a, revision_b)


sort_key = functools.cmp_to_key(compare)
