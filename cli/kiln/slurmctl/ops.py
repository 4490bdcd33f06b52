"""Drain and resume through scontrol on the controller; `kiln resume` resumes only `kiln drain`'s.

Both read the nodes' state first (one SSH exec), decide per node, then change the nodes as a
compare-and-set against that reading (kiln.slurmctl.cas: a node someone changed in between is
kept as it is now) and read the state again. `kiln drain` places `kiln:operator:USER: TEXT`
(kiln.parsers.drain_reason). A node already drained for any other reason (a quarantine, a
failed burn-in, a maintenance in progress, someone else's drain) keeps that reason: kiln takes
over no drain. `kiln resume` resumes operator drains only; a quarantine or burn-in drain is
burn-in's to lift (when the node passes), a maintenance drain its run's, and anyone else's
drain theirs: those are refused, naming who drained it, when and why, unless forced. A node
with running jobs is drained, not stopped: Slurm shows it `draining` until its jobs end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kiln.inventory import Cluster, Node
from kiln.parsers.drain_reason import POLICY, may_lift
from kiln.slurmctl import commands
from kiln.slurmctl.cas import Change, compare_and_set
from kiln.slurmctl.remote import Controller, Runner
from kiln.slurmctl.state import NodeState


@dataclass(slots=True)
class NodeChange:
    name: str
    before: NodeState | None
    after: NodeState | None = None
    action: str = ""  # drain, resume, kept, refused, none, unknown, failed
    message: str = ""
    ok: bool = True

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "action": self.action,
            "ok": self.ok,
            "message": self.message,
            "before": self.before.to_dict() if self.before else None,
            "after": self.after.to_dict() if self.after else None,
        }


@dataclass(slots=True)
class OpResult:
    operation: str  # drain | resume
    controller: str
    reason: str | None = None
    force: bool = False
    nodes: list[NodeChange] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(change.ok for change in self.nodes)

    def counts(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for change in self.nodes:
            result[change.action] = result.get(change.action, 0) + 1
        return result

    def to_dict(self) -> dict:
        return {
            "operation": self.operation,
            "controller": self.controller,
            "reason": self.reason,
            "force": self.force,
            "ok": self.ok,
            "counts": self.counts(),
            "nodes": [change.to_dict() for change in self.nodes],
        }


def _classify_unknown(node: Node, change: NodeChange) -> None:
    change.action = "unknown"
    if node.is_compute:
        change.ok = False
        change.message = "Slurm does not know this node (not in slurm.conf?)"
    else:
        change.message = "not a Slurm compute node; skipped"


def _not_ours(state: NodeState) -> str:
    """Why `kiln resume` leaves this drain alone: who lifts it, from the one drain policy."""
    kind = state.drain_kind
    if kind in POLICY and kind != "operator":
        return f"{POLICY[kind].placed_by}; lifted {POLICY[kind].when}"
    return "not drained by `kiln drain`: kiln resumes only its own operator drains"


def _apply(
    ctl: Controller, result: OpResult, reason: str | None, targets: list[NodeChange]
) -> None:
    """Change the targets as a compare-and-set against the state each was read in (a node
    someone changed since is kept as it is now), then read every node's state after it.
    `reason`: the drain to place; None: resume."""
    changes = [
        Change(c.name, c.before.reason if c.before and c.before.drained else None, reason)
        for c in targets
    ]
    outcomes = {o.node: o for o in compare_and_set(ctl, changes)}
    after = ctl.nodes()
    for change in result.nodes:
        change.after = after.get(change.name)
    wanted = result.operation == "drain"
    for change in targets:
        state, outcome = change.after, outcomes[change.name]
        if outcome.result == "kept":  # changed between our read and our update: not ours now
            change.action, change.ok = "kept", wanted and bool(state and state.drained)
            change.message = f"changed meanwhile ({outcome.now}); left as it is"
        elif state is None or state.drained is not wanted:
            change.ok = False
            change.action = "failed"
            shown = state.state if state else "gone from Slurm"
            change.message = f"still {shown} after scontrol update"


def _begin(cluster, nodes, runner, verb, **options):
    """The controller, the result, and each selected node with its state before the change."""
    ctl = Controller(cluster, **({"runner": runner} if runner else {}))
    result = OpResult(verb, ctl.name, **options)
    before = ctl.nodes()
    changes = [(node, NodeChange(node.name, before.get(node.name))) for node in nodes]
    result.nodes.extend(change for _, change in changes)
    return ctl, result, changes


def drain(
    cluster: Cluster,
    nodes: Sequence[Node],
    text: str,
    *,
    user: str | None = None,
    runner: Runner | None = None,
) -> OpResult:
    reason = commands.kiln_reason(text, user)  # refused before anything is run
    ctl, result, changes = _begin(cluster, nodes, runner, "drain", reason=reason)
    targets: list[NodeChange] = []
    for node, change in changes:
        state = change.before
        if state is None:
            _classify_unknown(node, change)
        elif state.drained and state.drain_kind != "operator":
            change.action = "kept"
            change.message = (
                f"already {state.describe_drain()}; kept that reason (kiln takes over no drain)"
            )
        else:
            change.action = "drain"
            targets.append(change)
    _apply(ctl, result, reason, targets)
    for change in targets:
        if change.ok and change.after and change.after.base == "draining":
            change.message = "jobs running: Slurm lets them finish, then the node is drained"
        elif change.ok:
            change.message = "drained"
    return result


def resume(
    cluster: Cluster,
    nodes: Sequence[Node],
    *,
    force: bool = False,
    runner: Runner | None = None,
) -> OpResult:
    ctl, result, changes = _begin(cluster, nodes, runner, "resume", force=force)
    targets: list[NodeChange] = []
    for node, change in changes:
        state = change.before
        if state is None:
            _classify_unknown(node, change)
        elif not state.drained:
            change.action = "none"
            change.message = f"not drained ({state.state}): already available"
            if not state.responding or state.base in ("down", "fail", "unknown"):
                change.message = f"not drained ({state.state}): nothing for resume to do"
        elif may_lift(state.reason, "operator") or force:
            change.action = "resume"
            if not may_lift(state.reason, "operator"):
                change.message = f"forced: was {state.describe_drain()}"
            targets.append(change)
        else:
            change.action = "refused"
            change.ok = False
            change.message = (
                f"{state.describe_drain()}; {_not_ours(state)} (--force to resume it anyway)"
            )
    _apply(ctl, result, None, targets)
    for change in targets:
        if change.ok and not change.message:
            change.message = "resumed"
    return result
