"""Ansible's host-range syntax: `gpu[001:128]`, `rack[a:d]-node[1:8]`, `n[0:20:5]`."""

from __future__ import annotations

import re
import string

_RANGE = re.compile(r"^(.*?)\[([^\[\]:]*):([^\[\]:]*)(?::([^\[\]:]*))?\](.*)$")


# More names than any cluster has: a pattern past it is a typo (`gpu[0:9999999]`), refused
# before a single name is made.
MAX_NAMES = 1_000_000


class HostRangeError(ValueError):
    pass


def count_host_range(pattern: str) -> int:
    """How many names `pattern` expands to, without making them (0 when it is malformed; the
    expansion then says why)."""
    match = _RANGE.match(pattern)
    if match is None:
        return 1
    _head, begin, end, step, tail = match.groups()
    begin = begin or "0"
    try:
        stride = int(step) if step else 1
    except ValueError:
        return 0
    if stride <= 0:
        return 0
    if begin.isdigit() and end.isdigit():
        first, last = int(begin), int(end)
    elif len(begin) == 1 and len(end) == 1 and begin.isalpha() and end.isalpha():
        first, last = string.ascii_letters.find(begin), string.ascii_letters.find(end)
    else:
        return 0
    items = max(0, (last - first) // stride + 1) if last >= first else 0
    return items * count_host_range(tail)


def expand_host_range(pattern: str) -> list[str]:
    """Expand every `[begin:end(:step)]` in a host pattern as Ansible does; a pattern of more
    than MAX_NAMES names is refused before any is made."""
    total = count_host_range(pattern)
    if total > MAX_NAMES:
        raise HostRangeError(
            f"host range '{pattern}' expands to {total:,} names, more than {MAX_NAMES:,}"
        )
    return _expand(pattern)


def _expand(pattern: str) -> list[str]:
    match = _RANGE.match(pattern)
    if match is None:
        return [pattern]
    head, begin, end, step, tail = match.groups()
    begin = begin or "0"
    if not end:
        raise HostRangeError(f"host range '{pattern}' must give an end")
    try:
        stride = int(step) if step else 1
    except ValueError as error:
        raise HostRangeError(f"host range '{pattern}' has a non-numeric step") from error
    if stride <= 0:
        raise HostRangeError(f"host range '{pattern}' needs a positive step")

    if begin.isdigit() and end.isdigit():
        if begin[0] == "0" and len(begin) > 1:
            if len(begin) != len(end):
                raise HostRangeError(
                    f"host range '{pattern}': a zero-padded begin and its end must have "
                    "the same number of digits"
                )
            width = len(begin)
            items = [str(i).zfill(width) for i in range(int(begin), int(end) + 1, stride)]
        else:
            items = [str(i) for i in range(int(begin), int(end) + 1, stride)]
        if int(begin) > int(end):
            raise HostRangeError(f"host range '{pattern}' begins after it ends")
    elif (
        len(begin) == 1
        and len(end) == 1
        and begin in string.ascii_letters
        and (end in string.ascii_letters)
    ):
        first, last = string.ascii_letters.index(begin), string.ascii_letters.index(end)
        if first > last:
            raise HostRangeError(f"host range '{pattern}' begins after it ends")
        items = list(string.ascii_letters[first : last + 1 : stride])
    else:
        raise HostRangeError(
            f"host range '{pattern}' must be numeric ([01:10]) or single letters ([a:f])"
        )
    tails = _expand(tail)
    return [f"{head}{item}{rest}" for item in items for rest in tails]
