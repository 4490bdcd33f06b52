"""Slurm hostlist expressions: `gpu[001-040,042]` <-> the host names they stand for.

Names are grouped by the text around their last run of digits and by its zero-padded width,
so `gpu001..gpu128` folds to `gpu[001-128]` while `n9` and `n010` stay apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LAST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")
_BRACKET = re.compile(r"^(.*?)\[([^\]]+)\](.*)$")


class HostlistError(ValueError):
    pass


def _ranges(numbers: list[int], width: int) -> str:
    spans: list[tuple[int, int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], number)
        elif not spans or number != spans[-1][1]:
            spans.append((number, number))
    fmt = f"{{:0{width}d}}" if width else "{}"
    return ",".join(
        fmt.format(a) if a == b else f"{fmt.format(a)}-{fmt.format(b)}" for a, b in spans
    )


def compress(names: Iterable[str]) -> str:
    """Fold host names into one Slurm hostlist expression, keeping first-seen group order."""
    numbered: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, str] | str] = []
    plain: set[str] = set()
    for name in names:
        match = _LAST_NUMBER.match(name)
        if match is None:
            if name not in plain:
                plain.add(name)
                order.append(name)
            continue
        prefix, digits, suffix = match.groups()
        if (prefix, suffix) not in numbered:
            numbered[(prefix, suffix)] = []
            order.append((prefix, suffix))
        numbered[(prefix, suffix)].append(digits)
    parts = []
    for key in order:
        if isinstance(key, str):
            parts.append(key)
            continue
        prefix, suffix = key
        for width, numbers in _by_width(numbered[key]):
            if len(numbers) == 1:
                number = f"{numbers[0]:0{width}d}" if width else str(numbers[0])
                parts.append(f"{prefix}{number}{suffix}")
            else:
                parts.append(f"{prefix}[{_ranges(numbers, width)}]{suffix}")
    return ",".join(parts)


def _by_width(digit_strings: list[str]) -> list[tuple[int, list[int]]]:
    """Split numbers into zero-padded widths; `100` joins the width-3 group of `001`."""
    lengths = set(map(len, digit_strings))
    if len(lengths) == 1:  # one length (gpu00001..gpu12500, the usual case): one group
        (length,) = lengths
        padded = length > 1 and any(d.startswith("0") for d in digit_strings)
        return [(length if padded else 0, sorted(set(map(int, digit_strings))))]
    padded = {len(d) for d in digit_strings if d.startswith("0") and len(d) > 1}
    groups: dict[int, set[int]] = {}
    for digits in digit_strings:
        width = len(digits) if len(digits) in padded else 0
        groups.setdefault(width, set()).add(int(digits))
    return [(width, sorted(numbers)) for width, numbers in sorted(groups.items())]


def _split_top_level(expression: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in expression:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expression!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"unbalanced '[' in hostlist {expression!r}")
    parts.append("".join(current))
    return [p for p in parts if p]


# More names than any cluster has: an expression past it is a typo (`gpu[0-9999999]`), refused
# before a single name is made.
MAX_NAMES = 1_000_000


def count(expression: str) -> int:
    """How many names `expression` expands to, without making them (malformed ranges count
    0: the expansion says what is wrong with them)."""
    total = 0
    for part in _split_top_level(expression.strip()):
        match = _BRACKET.match(part)
        if match is None:
            total += 1
            continue
        _prefix, body, suffix = match.groups()
        items = 0
        for item in body.split(","):
            first, _, last = item.partition("-")
            if first.isdigit() and (not last or last.isdigit()):
                items += max(0, (int(last) if last else int(first)) - int(first) + 1)
        total += items * (count(suffix) if "[" in suffix else 1)
    return total


def expand(expression: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order; one of more than
    MAX_NAMES names is refused before any is made."""
    total = count(expression)
    if total > MAX_NAMES:
        raise HostlistError(
            f"hostlist {expression!r} expands to {total:,} names, more than {MAX_NAMES:,}"
        )
    return _expand(expression)


def _expand(expression: str) -> list[str]:
    names: list[str] = []
    for part in _split_top_level(expression.strip()):
        match = _BRACKET.match(part)
        if match is None:
            names.append(part)
            continue
        prefix, body, suffix = match.groups()
        for tail in _expand(suffix) if "[" in suffix else [suffix]:
            for item in body.split(","):
                first, _, last = item.partition("-")
                if not first.isdigit() or (last and not last.isdigit()):
                    raise HostlistError(f"bad range {item!r} in hostlist {expression!r}")
                width = len(first) if first.startswith("0") else 0
                end = int(last) if last else int(first)
                if end < int(first):
                    raise HostlistError(f"range {item!r} runs backwards in {expression!r}")
                for number in range(int(first), end + 1):
                    text = f"{number:0{width}d}" if width else str(number)
                    names.append(f"{prefix}{text}{tail}")
    return names
