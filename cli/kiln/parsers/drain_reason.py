"""kiln's drain reasons: every drain kiln places says what kind it is and which operation placed it.

    format_reason("burnin", "20261130T101500Z-3f9a1c", "gemm gpu3 612 TFLOPS < floor 700")
        # "kiln:burnin:20261130T101500Z-3f9a1c: gemm gpu3 612 TFLOPS < floor 700"
    parse_reason(reason)      # DrainReason(kind, operation, why), or None: not kiln's
    operator_reason("disk swap", "alice")   # "kiln:operator:alice: disk swap"

The grammar is `kiln:<kind>:<operation id>: <why>`. Kinds (KINDS): quarantine (a new or changed
node, until burn-in passes), burnin (a failed burn-in), health (a failed health check),
maintenance (a disruptive change, such as a driver upgrade, in progress) and operator (`kiln
drain`). The operation id is the run that placed it: the provision run id, the burn-in run id,
the user who ran `kiln drain`; empty when the caller had none (it then parses as None).

Reasons written by older kiln ("kiln: TEXT") still parse, with the kind they meant and no
operation id: "..., quarantined until burn-in passes" is quarantine, "maintenance" and
"driver upgrade ..." are maintenance, "TEXT (by USER)" is operator, any other is a failed
burn-in. A reason is kiln's only when it STARTS with the grammar; an operator's reason that
mentions "kiln:" further on is not kiln's, and neither is a "kiln:" reason of no known form.

Who may resume what (kiln.slurmctl, kiln.burnin, the slurm_maintenance role): an operation
resumes only what it drained itself. Burn-in resumes quarantine and burnin drains of nodes it
passed; `kiln resume` resumes operator drains; the slurm_maintenance role resumes only a node
whose reason is exactly the one its run placed. Every reason built here is one line of
printable text (Slurm keeps it, `sinfo` prints it, scontrol takes it as one argv element). The
roles read this module through the filters at the end (playbooks/filter_plugins/kiln_filters.py).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from kiln.parsers.slurm import parse_scontrol_nodes

PREFIX = "kiln:"
KINDS = ("quarantine", "burnin", "health", "maintenance", "operator")
REASON_MAX = 160  # characters of a whole reason; a longer `why` is cut, ending in "..."

_OPERATION = re.compile(r"^[A-Za-z0-9._@+-]*$")
_REASON = re.compile(
    rf"^kiln:(?P<kind>{'|'.join(KINDS)}):(?P<operation>[A-Za-z0-9._@+-]*): (?P<why>\S.*)$"
)
_UNSAFE_USER = re.compile(r"[^A-Za-z0-9._-]")
_LEGACY = "kiln: "
_LEGACY_OPERATOR = re.compile(r"\(by (?P<user>[A-Za-z0-9._-]+)\)\s*$")
_LEGACY_QUARANTINE = "quarantined until burn-in passes"

# Reason texts the roles build by name (the `kiln_drain_reason` filter): name -> (kind, why).
FIXED = {
    "quarantine": ("quarantine", "{why}, " + _LEGACY_QUARANTINE),  # slurm_node: new or changed
    "maintenance": ("maintenance", "{why}"),  # slurm_maintenance: any disruptive work
    "driver_upgrade": ("maintenance", "driver upgrade {installed} -> {target}"),  # nvidia_driver
}


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    """Who places a kind of drain, which operations may lift it, and when."""

    kind: str
    placed_by: str
    lifted_by: tuple[str, ...]  # the operations (LIFTERS) that may lift it
    when: str  # when they lift it, for messages ("kiln resume" refusals, docs/operations.md)


# The one drain policy: slurmctl (`kiln drain`/`kiln resume`), burn-in (which drains it retests
# and lifts on a pass), the health check (its auto-resume) and the roles (slurm_maintenance
# through the kiln_drain_may_lift filter) all read it. Every lift is a compare-and-set: the
# node's reason is read again and must still be the one the lifter saw (kiln.slurmctl.cas).
LIFTERS = ("burnin", "health", "maintenance", "operator")
POLICY = {
    "quarantine": DrainPolicy(
        "quarantine", "provision (slurm_node): a new node, or one whose hardware changed",
        ("burnin",), "when the node passes a burn-in: `kiln burnin` resumes it then",
    ),
    "burnin": DrainPolicy(
        "burnin", "`kiln burnin`: the node failed a check",
        ("burnin",), "when the node passes a later burn-in: `kiln burnin` resumes it then",
    ),
    "health": DrainPolicy(
        "health", "the health check (Slurm's HealthCheckProgram, Prolog, `kiln health`)",
        ("burnin", "health"),
        "when a burn-in passes, or (auto_resume on) the health check reads the probe healthy "
        "again, for a finding a later reading can disprove (never an Xid or IB error counters)",
    ),
    "maintenance": DrainPolicy(
        "maintenance", "a rolling change (slurm_maintenance: driver upgrade, reboot)",
        ("maintenance",), "by the run that placed it, when its work on the node is done",
    ),
    "operator": DrainPolicy(
        "operator", "`kiln drain` (an operator)",
        ("operator",), "by `kiln resume`",
    ),
}  # fmt: skip


def may_lift(reason: str | None, by: str) -> bool:
    """Whether operation `by` (one of LIFTERS) may lift a drain with this reason: only a kiln
    reason whose kind's policy names it. Anyone else's drain is theirs to lift."""
    if by not in LIFTERS:
        raise ValueError(f"unknown lifter {by!r}; known: {', '.join(LIFTERS)}")
    parsed = parse_reason(reason)
    return parsed is not None and by in POLICY[parsed.kind].lifted_by


def kinds_lifted_by(by: str) -> tuple[str, ...]:
    """The kinds of kiln drain operation `by` may lift (burn-in: the ones it retests)."""
    return tuple(kind for kind, policy in POLICY.items() if by in policy.lifted_by)


@dataclass(frozen=True, slots=True)
class DrainReason:
    kind: str  # one of KINDS
    operation: str | None  # the run or user that placed it; None when not recorded
    why: str

    @property
    def text(self) -> str:
        return format_reason(self.kind, self.operation or "", self.why)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "operation": self.operation, "why": self.why}


def one_line(text: str) -> str:
    """`text` as one line of printable characters: control characters become spaces, runs of
    whitespace one space."""
    cleaned = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    return " ".join(cleaned.split())


def format_reason(kind: str, operation: str | None, why: str) -> str:
    """`kiln:<kind>:<operation>: <why>`, one line, at most REASON_MAX characters; ValueError on
    an unknown kind, an operation id that is not a plain token or an empty `why`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kiln drain kind {kind!r}; known: {', '.join(KINDS)}")
    operation = operation or ""
    if not _OPERATION.match(operation) or len(operation) > 64:
        raise ValueError(f"operation id {operation!r} is not a plain token (A-Z a-z 0-9 . _ @ + -)")
    text = one_line(why)
    if not text:
        raise ValueError("a drain reason needs a why")
    head = f"{PREFIX}{kind}:{operation}: "
    room = REASON_MAX - len(head)
    if len(text) > room:
        text = text[: room - 3].rstrip() + "..."
    return head + text


def _legacy(text: str) -> DrainReason | None:
    """A reason older kiln wrote: "kiln: TEXT", with the kind it meant."""
    why = text[len(_LEGACY) :].strip()
    if not why:
        return None
    if why.endswith(_LEGACY_QUARANTINE):
        return DrainReason("quarantine", None, why)
    if why == "maintenance" or why.startswith("driver upgrade "):
        return DrainReason("maintenance", None, why)
    if _LEGACY_OPERATOR.search(why):
        return DrainReason("operator", None, why)
    return DrainReason("burnin", None, why)  # "gemm ...", "no result ...", "ib ...", "dcgm ..."


def parse_reason(reason: str | None) -> DrainReason | None:
    """(kind, operation, why) of a reason kiln placed; None for anyone else's reason."""
    if not reason:
        return None
    text = reason.strip("\r\n")
    match = _REASON.match(text)
    if match:
        return DrainReason(match["kind"], match["operation"] or None, match["why"].strip())
    if text.startswith(_LEGACY):
        return _legacy(text)
    return None


def is_kiln_reason(reason: str | None) -> bool:
    """Whether kiln placed this drain reason (of any kind, new or old form)."""
    return parse_reason(reason) is not None


def reason_kind(reason: str | None) -> str | None:
    """The kind of a kiln reason; None for anyone else's."""
    parsed = parse_reason(reason)
    return parsed.kind if parsed else None


def drain_reason(text: str) -> str:
    """A burn-in report's reason for a failing node: "kiln: TEXT" (the older form; the campaign
    drains with `format_reason("burnin", run id, why)`)."""
    return f"{_LEGACY}{text}"


def safe_user(name: str) -> str:
    """A user name reduced to characters that cannot bring shell or bracket syntax along."""
    return _UNSAFE_USER.sub("_", name)


def operator_reason(text: str, user: str) -> str:
    """`kiln drain`'s reason: "kiln:operator:USER: TEXT"."""
    return format_reason("operator", safe_user(user)[:32] or "unknown", text)


def reason_operator(reason: str | None) -> str | None:
    """The USER of an operator drain kiln placed (old form: "... (by USER)"); None otherwise."""
    parsed = parse_reason(reason)
    if parsed is None or parsed.kind != "operator":
        return None
    if parsed.operation:
        return parsed.operation
    match = _LEGACY_OPERATOR.search(parsed.why)
    return match["user"] if match else None


def fixed_reason(name: str, operation: str | None = "", **fields: str) -> str:
    """A reason the roles build by name (FIXED), e.g. fixed_reason("quarantine", run_id,
    why="new node") -> "kiln:quarantine:RUN: new node, quarantined until burn-in passes"."""
    if name in KINDS and name not in FIXED:
        kind, template = name, "{why}"
    elif name in FIXED:
        kind, template = FIXED[name]
    else:
        raise ValueError(f"unknown kiln drain reason {name!r}; known: {', '.join(FIXED)}")
    return format_reason(kind, operation, template.format(**fields))


_UNAVAILABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE"}


def node_drain(text: str, name: str) -> dict:
    """Node `name` in `scontrol show node` output, for the roles: {} when the output holds no
    such node, else {name, state, unavailable (drained, down, failed or not responding: Slurm
    schedules nothing on it), reason, kind, operation}; kind and operation are "" when the
    reason is not kiln's."""
    found = [n for n in parse_scontrol_nodes(text) if n.name == name] if text.strip() else []
    if not found:
        return {}
    node = found[0]
    parts = {node.state, *node.state_flags}
    reason = node.reason.text if node.reason else ""
    parsed = parse_reason(reason)
    return {
        "name": node.name,
        "state": node.fields.get("State", ""),
        "unavailable": bool(parts & _UNAVAILABLE) or node.not_responding,
        "reason": reason,
        "kind": parsed.kind if parsed else "",
        "operation": (parsed.operation or "") if parsed else "",
    }


def _reason_parts(reason: str | None) -> dict:
    parsed = parse_reason(reason)
    return parsed.to_dict() if parsed else {}


# The same grammar for the roles (playbooks/filter_plugins/kiln_filters.py):
#   "{{ 'maintenance' | kiln_drain_reason(kiln_run_id, why='driver upgrade') }}",
#   "{{ reason | is_kiln_reason }}", "{{ reason | kiln_drain_kind }}",
#   "{{ scontrol_stdout | kiln_node_drain(inventory_hostname) }}"
FILTERS = {
    "kiln_drain_reason": fixed_reason,
    "is_kiln_reason": is_kiln_reason,
    "kiln_drain_kind": lambda reason: reason_kind(reason) or "",
    "kiln_drain_parts": _reason_parts,
    "kiln_node_drain": node_drain,
    "kiln_drain_may_lift": may_lift,
}
