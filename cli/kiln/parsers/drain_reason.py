"""kiln's drain reasons: how kiln marks the Slurm drains it sets, and how it knows them again.

    drain_reason("gemm gpu3 612 TFLOPS < floor 700")   # "kiln: gemm gpu3 612 TFLOPS < floor 700"
    operator_reason("disk swap", "alice")               # "kiln: disk swap (by alice)"
    fixed_reason("quarantine", why="new node")          # "kiln: new node, quarantined until ..."
    is_kiln_reason(reason)                              # kiln drained it: kiln may resume it

A reason is kiln's when it STARTS with the prefix; an operator's reason that merely mentions
"kiln:" further on stays the operator's. kiln resumes only what kiln drained: `kiln resume`,
burn-in (it tests kiln-drained nodes) and the slurm_maintenance role (it leaves an operator's
drain alone) all ask `is_kiln_reason`. The roles read this module through the filters below
(playbooks/filter_plugins/kiln_filters.py), so the prefix and the fixed texts live only here.
"""

from __future__ import annotations

import re

PREFIX = "kiln:"

# The reasons kiln's roles drain with, by name (filled in with str.format).
FIXED = {
    "maintenance": "maintenance",  # slurm_maintenance: work that must not run under jobs
    "quarantine": "{why}, quarantined until burn-in passes",  # slurm_node: new or changed
    "driver_upgrade": "driver upgrade {installed} -> {target}",  # nvidia_driver
}

_UNSAFE_USER = re.compile(r"[^A-Za-z0-9._-]")
_OPERATOR = re.compile(r"\(by (?P<user>[A-Za-z0-9._-]+)\)\s*$")


def is_kiln_reason(reason: str | None) -> bool:
    """Whether kiln set this drain reason (it starts with "kiln:")."""
    return reason is not None and reason.startswith(PREFIX)


def drain_reason(text: str) -> str:
    """The reason kiln stores for `text`: "kiln: TEXT"."""
    return f"{PREFIX} {text}"


def fixed_reason(kind: str, **fields: str) -> str:
    """One of the FIXED reasons, e.g. fixed_reason("quarantine", why="hardware changed")."""
    if kind not in FIXED:
        raise ValueError(f"unknown kiln drain reason {kind!r}; known: {', '.join(FIXED)}")
    return drain_reason(FIXED[kind].format(**fields))


def safe_user(name: str) -> str:
    """A user name reduced to characters that cannot bring shell or bracket syntax along."""
    return _UNSAFE_USER.sub("_", name)


def operator_reason(text: str, user: str) -> str:
    """`kiln drain`'s reason: "kiln: TEXT (by USER)", naming the person who ran kiln."""
    return drain_reason(f"{text} (by {safe_user(user)})")


def reason_operator(reason: str | None) -> str | None:
    """The USER of a kiln reason written by `operator_reason`; None for any other reason."""
    match = _OPERATOR.search(reason or "") if is_kiln_reason(reason) else None
    return match["user"] if match else None


# The same grammar for the roles (playbooks/filter_plugins/kiln_filters.py):
#   "{{ 'maintenance' | kiln_drain_reason }}", "{{ reason | is_kiln_reason }}"
FILTERS = {
    "kiln_drain_reason": fixed_reason,
    "is_kiln_reason": is_kiln_reason,
}
