"""Which stage runs on which node: the desired fingerprints against the nodes' probes. Pure.

Per node and stage, the stage is skipped only when the node's record holds the desired
fingerprint and the probe found nothing drifted. Anything else runs it, fail safe:

    changed       the record's fingerprint is not the desired one (code, variables, files)
    drifted       a managed file, package or service is no longer as the stage left it, or
                  a program the stage installs reports another version than declared
                  (`slurmd -V`, `slurmctld -V`: the slurm stage), or (the slurm stage, which
                  quarantines) the node's hardware identity is not what it last saw: a
                  replaced board, GPU or HCA (kiln.parsers.identity)
    no_record     the node holds no record of the stage (never applied by a recording kiln)
    probe_failed  the probe did not answer or could not read a record: every stage runs
    pending       a restart marker a failed run left (/var/lib/kiln/*-pending): every stage runs
    failed_last   the node failed or was unreachable in the last run: every stage runs

    with_others   an ALWAYS stage (preflight: checks, manages nothing) on a node where any
                  other stage runs; skipped where none does
    asked         an ALWAYS stage asked for on its own (`--stages preflight`): it runs on
                  every node, since checking is all it does
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.drift.remote import NodeProbe
from kiln.parsers.identity import identity_change, identity_only
from kiln.profiles.slurm import release_of, upgrade_steps

ALWAYS = ("preflight",)
QUARANTINES = "slurm"  # the stage whose slurm_node role drains a node whose identity changed
RUN_REASONS = (
    "changed", "drifted", "no_record", "probe_failed", "pending", "failed_last", "with_others",
    "asked",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Decision:
    stage: str
    node: str
    reason: str  # "unchanged" or one of RUN_REASONS
    details: tuple[Mapping[str, Any], ...] = ()  # the drift found, or the probe's error

    @property
    def run(self) -> bool:
        return self.reason != "unchanged"

    def describe(self) -> str:
        if self.reason == "drifted":
            return ", ".join(describe_drift(item) for item in self.details)
        if self.details and "error" in self.details[0]:
            return f"{self.reason}: {self.details[0]['error']}"
        return self.reason


def describe_drift(item: Mapping[str, Any]) -> str:
    kind, name, was, now = item.get("kind"), item.get("name"), item.get("recorded"), item.get("now")
    if kind == "file":
        return f"file {name} " + ("missing" if now is None else "modified")
    if kind == "package":
        return f"package {name} {was} -> {now or 'not installed'}"
    if kind == "version":
        said = f"{name} -V {now or 'not found'}, declared {was}"
        steps = upgrade_steps(str(now), str(was)) if now and was else None
        if steps:  # the next provision's preflight refuses this node (issue 31)
            said += f" (beyond Slurm {release_of(str(was))}'s upgrade window: through "
            said += f"{' then '.join(steps)} first)"
        return said
    if kind == "identity":
        return f"{name} (was {was}, now {now})"
    if kind == "service":
        was, now = was or {}, now or {}
        keys = sorted(set(was) | set(now))
        changes = [f"{k} {was.get(k)} -> {now.get(k)}" for k in keys if was.get(k) != now.get(k)]
        return f"service {name} " + ", ".join(changes)
    return f"{kind} {name}"


@dataclass(frozen=True, slots=True)
class Assessment:
    stages: tuple[str, ...]
    decisions: Mapping[str, Mapping[str, Decision]] = field(default_factory=dict)  # stage->node

    def skip(self) -> dict[str, frozenset[str]]:
        """stage -> the nodes it is skipped on (kiln.plan.PlanOptions.skip)."""
        return {
            stage: frozenset(n for n, d in nodes.items() if not d.run)
            for stage, nodes in self.decisions.items()
        }

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for nodes in self.decisions.values():
            for decision in nodes.values():
                found[decision.reason] = found.get(decision.reason, 0) + 1
        return found

    def to_run(self) -> list[Decision]:
        """The decisions that run a stage (ALWAYS stages left out), stage by stage."""
        return [
            d
            for stage in self.stages
            if stage not in ALWAYS
            for d in self.decisions.get(stage, {}).values()
            if d.run
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "counts": self.counts(),
            "stages": {
                stage: {
                    node: {"reason": d.reason, "details": [dict(x) for x in d.details]}
                    for node, d in nodes.items()
                }
                for stage, nodes in self.decisions.items()
            },
        }


def _decide(stage: str, node: str, wanted: str, probe: NodeProbe | None, failed: bool) -> Decision:
    if probe is None or not probe.ok:
        why = probe.error if probe is not None else "not probed"
        return Decision(stage, node, "probe_failed", ({"error": why},))
    if probe.pending:
        return Decision(stage, node, "pending", ({"error": ", ".join(probe.pending)},))
    if failed:
        return Decision(stage, node, "failed_last")
    record = probe.stages.get(stage)
    if record is None:
        return Decision(stage, node, "no_record")
    if record.get("fingerprint") != wanted:
        return Decision(stage, node, "changed")
    drift = tuple(record.get("drift") or ())
    if stage == QUARANTINES:
        drift += _identity_drift(probe)
    if drift:
        return Decision(stage, node, "drifted", drift)
    return Decision(stage, node, "unchanged")


def _identity_drift(probe: NodeProbe) -> tuple[Mapping[str, Any], ...]:
    """The node's identity as drift, when what the slurm_node role saw and what the node's
    reader prints now differ in a word both hold (no record of either: nothing to compare)."""
    if not probe.joined or probe.identity is None:
        return ()
    change = identity_change(probe.joined, probe.identity)
    if not change:
        return ()
    return ({"kind": "identity", "name": change, "recorded": identity_only(probe.joined),
             "now": identity_only(probe.identity)},)  # fmt: skip


def assess(
    desired: Mapping[str, Mapping[str, str]],
    probes: Mapping[str, NodeProbe],
    stages: Sequence[str],
    failed_last: Iterable[str] = (),
) -> Assessment:
    """`desired`: stage -> node -> fingerprint (kiln.plan.fingerprint) for the plan's stages
    in `stages` order; `probes`: node -> its probe."""
    failed = set(failed_last)
    decisions: dict[str, dict[str, Decision]] = {}
    for stage in stages:
        if stage in ALWAYS:
            continue
        decisions[stage] = {
            node: _decide(stage, node, wanted, probes.get(node), node in failed)
            for node, wanted in desired.get(stage, {}).items()
        }
    busy = {node for nodes in decisions.values() for node, d in nodes.items() if d.run}
    asked_alone = all(stage in ALWAYS for stage in stages)
    for stage in stages:
        if stage in ALWAYS:
            decisions[stage] = {
                node: Decision(
                    stage,
                    node,
                    "asked" if asked_alone else "with_others" if node in busy else "unchanged",
                )
                for node in desired.get(stage, {})
            }
    ordered = {stage: decisions[stage] for stage in stages if stage in decisions}
    return Assessment(tuple(stages), ordered)
