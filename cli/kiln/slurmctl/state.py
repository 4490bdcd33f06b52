"""NodeState: one node as Slurm sees it, read from aggregated sinfo or from `scontrol show node`.

sinfo prints `%N|%T|%G|%u|%H|%E` (SINFO_FORMAT): a hostlist, the long state (`idle`,
`drained`, `draining`, `mixed`, `down*`, ...), Gres, who set the reason, when, and the reason.
Nodes sharing every value share one line, so the answer stays small on a large cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.parsers import ParseError
from kiln.parsers.drain_reason import DrainReason, parse_reason, reason_operator
from kiln.parsers.slurm import SlurmNode, gpu_count, parse_gres, parse_sinfo
from kiln.render.hostlist import HostlistError, expand
from kiln.slurmctl.commands import SINFO_FIELDS

_NOT_SET = {"", "none", "unknown", "(null)", "n/a"}
_SUFFIXES = "*~#!%$@^-"
_DRAIN = {"drain", "drained", "draining"}
# scontrol's answer for a name it does not know (on stdout, exit 1); any other failure to
# read a node (slurmctld down: "slurm_load_node error: Unable to contact slurm controller
# (connect failure)" on stderr) is an error, never "not in Slurm".
_NOT_FOUND = re.compile(r"^Node (?P<name>\S+) not found$")


def split_not_found(text: str) -> tuple[str, list[str]]:
    """(`scontrol show node` output without its "Node X not found" lines, the names in them)."""
    kept, missing = [], []
    for line in text.splitlines():
        match = _NOT_FOUND.match(line.strip())
        if match:
            missing.append(match["name"])
        else:
            kept.append(line)
    return "\n".join(kept), missing


def _value(text: str | None) -> str | None:
    return None if text is None or text.strip().lower() in _NOT_SET else text.strip()


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    state: str  # as Slurm prints it, lower case: "idle", "drained", "draining", "down*", ...
    reason: str | None = None
    reason_user: str | None = None  # the account that ran scontrol (root over SSH, for kiln)
    reason_time: str | None = None
    gres: str | None = None

    @property
    def base(self) -> str:
        """The state without flags or suffixes: "idle", "drained", "mixed", "down"."""
        return self.state.split("+")[0].rstrip(_SUFFIXES)

    @property
    def responding(self) -> bool:
        return not any(part.endswith("*") for part in self.state.split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm schedules nothing new on it."""
        parts = [part.rstrip(_SUFFIXES) for part in self.state.split("+")]
        return any(part in _DRAIN for part in parts)

    @property
    def drain(self) -> DrainReason | None:
        """Kind, operation and why of a drain kiln placed; None when not drained or not kiln's."""
        return parse_reason(self.reason) if self.drained else None

    @property
    def drained_by_kiln(self) -> bool:
        return self.drain is not None

    @property
    def drain_kind(self) -> str | None:
        """quarantine, burnin, health, maintenance or operator (kiln.parsers.drain_reason)."""
        drain = self.drain
        return drain.kind if drain else None

    @property
    def drained_by(self) -> str | None:
        """Who drained it: the operator kiln recorded in its reason, else Slurm's user."""
        operator = reason_operator(self.reason) if self.drained_by_kiln else None
        return operator or self.reason_user

    @property
    def gpus(self) -> int:
        try:
            return gpu_count(parse_gres(self.gres))
        except ParseError:
            return 0

    def describe_drain(self) -> str:
        """ "drained by root at 2026-11-30T03:19:14: disk swap" for messages."""
        who = self.drained_by or "an unknown user"
        when = f" at {self.reason_time}" if self.reason_time else ""
        return f"{self.state} by {who}{when}: {self.reason or 'no reason given'}"

    def to_dict(self) -> dict:
        return {
            "state": self.state,
            "drained": self.drained,
            "responding": self.responding,
            "reason": self.reason,
            "reason_user": self.reason_user,
            "reason_time": self.reason_time,
            "drained_by": self.drained_by if self.drained else None,
            "drained_by_kiln": self.drained_by_kiln,
            "drain": self.drain.to_dict() if self.drain else None,
            "gres": self.gres,
            "gpus": self.gpus,
        }


def from_sinfo(text: str) -> dict[str, NodeState]:
    """Every node in aggregated sinfo output (SINFO_FORMAT), by name, in Slurm's order.

    A node in several partitions appears on several lines with the same values; the first wins.
    """
    if not text.strip():
        return {}
    nodes: dict[str, NodeState] = {}
    for row in parse_sinfo(text, SINFO_FIELDS, sep="|"):
        try:
            names = expand(row.node)
        except HostlistError as error:
            raise ParseError("sinfo", f"cannot read hostlist {row.node!r}: {error}") from error
        values = row.values
        for name in names:
            nodes.setdefault(
                name,
                NodeState(
                    name=name,
                    state=values["state"].lower(),
                    reason=_value(values["reason"]),
                    reason_user=_value(values["user"]),
                    reason_time=_value(values["time"]),
                    gres=_value(values["gres"]),
                ),
            )
    return nodes


def from_scontrol(node: SlurmNode) -> NodeState:
    """A NodeState from one parsed `scontrol show node` block (State=IDLE+DRAIN -> idle+drain)."""
    state = node.fields.get("State", "UNKNOWN").lower()
    reason = node.reason
    return NodeState(
        name=node.name,
        state=state,
        reason=reason.text if reason else None,
        reason_user=reason.user if reason else None,
        reason_time=reason.time if reason else None,
        gres=_value(node.fields.get("Gres")),
    )
