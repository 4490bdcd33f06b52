"""Verdicts: one judged fact about a GPU, node, link, node pair or job.

Every node gets one verdict per check it was judged on (passed or not: JUnit shows a test case
per node and check); a GPU gets its own verdict only when it fails, so 100,000 healthy GPUs do
not become 100,000 objects. A failing verdict with action `drain` names a Slurm drain reason.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from kiln.parsers.drain_reason import drain_reason

REASON_MAX = 99  # Slurm takes longer reasons, but `sinfo -R` and people read these


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"  # below a performance threshold
    CRITICAL = "critical"  # wrong results, hardware slowdown, no result, missing GPU


class Action(StrEnum):
    NONE = "none"
    DRAIN = "drain"  # take the node out of service (Slurm drain with `reason`)
    INVESTIGATE = "investigate"  # a person looks: a link, a pair, the fabric as a whole


SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}

# check name -> what it means (the JSON report and the README list these)
CHECKS = {
    "tested": "the node was tested: not busy with other jobs, its result from the node itself",
    "result": "the node's gemm job produced a readable result",
    "gpu_count": "every GPU the inventory declares ran the gemm",
    "checksum": "the gemm's products match an FP64 reference and are bitwise the same on every "
    "GPU of the node and every repeat (no silent data corruption)",
    "gemm_floor": "TFLOPS per GPU at or above the profile floor",
    "gemm_vs_node_best": "no GPU more than gemm_relative_pct below the best GPU of its node",
    "throttle": "no hardware or thermal clock slowdown during the gemm",
    "node_vs_fleet": "node mean TFLOPS not more than node_relative_pct below its profile's median",
    "allreduce_node": "all-reduce busbw inside a node at or above its profile intra-node floor",
    "allreduce_fabric": "multi-node all-reduce busbw at or above rails x line rate x efficiency",
    "allreduce_domain": "all-reduce across an NVLink domain (an NVL72 rack) at or above its floor",
    "allreduce_pairs": "the node's pairwise all-reduces are not mostly slow",
    "allreduce_link": "a node pair is slow while both nodes are fine with others",
    "allreduce_correct": "the all-reduce produced the exact sum (nccl-tests: #wrong is 0)",
    "ib_hca": "every declared HCA present, its port Active/LinkUp at the declared rate",
    "ib_bandwidth": "ib_write_bw on each rail at or above its floor (a share of the line rate)",
    "ib_link": "a node pair is slow on a rail while both nodes are fine with other peers",
    "ib_uplink": "a leaf is slow on a rail to other leaves while fine within: its uplink",
    "ib_counters": "no InfiniBand error counter of a declared port rose during burn-in",
    "dcgm": "dcgmi diag (level by suite) failed no test and skipped no required test",
}


def num(value: float | None) -> str:
    """A figure for people: 612, 38.4, 0.0421."""
    if value is None:
        return "-"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"


def reason(text: str) -> str:
    """A Slurm drain reason: 'kiln: ...', one line, at most REASON_MAX characters."""
    text = drain_reason(" ".join(text.split()))
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


class Verdict(NamedTuple):
    """One judged fact. A NamedTuple rather than a frozen dataclass: immutable and hashable
    all the same, and built in half the time; a 12,500-node run builds 112,500 of them
    (bench/judge_scale.py)."""

    subject: str  # gpu | node | link | pair | job | fabric
    name: str  # "gpu012/gpu3", "gpu012", "gpu012<->gpu044", "gpu012<->gpu044 rail1", "fabric-ring"
    check: str  # a key of CHECKS
    passed: bool
    measured: float | None = None
    threshold: float | None = None
    unit: str = ""
    severity: Severity = Severity.INFO
    action: Action = Action.NONE
    message: str = ""  # one line for people; the drain reason is built from it
    node: str | None = None  # the node this verdict belongs to, when it is about one
    rule: str = ""  # which rule set the threshold, where several could (all-reduce floors by scope)

    @property
    def reason(self) -> str:
        return reason(self.message) if not self.passed else ""

    def to_dict(self) -> dict:
        return {
            "subject": self.subject,
            "name": self.name,
            "node": self.node,
            "check": self.check,
            "passed": self.passed,
            "measured": self.measured,
            "threshold": self.threshold,
            "unit": self.unit,
            "severity": str(self.severity),
            "action": str(self.action),
            "message": self.message,
            "reason": self.reason,
            "rule": self.rule,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        return cls(
            subject=d["subject"],
            name=d["name"],
            node=d.get("node"),
            check=d["check"],
            passed=bool(d["passed"]),
            measured=d.get("measured"),
            threshold=d.get("threshold"),
            unit=d.get("unit", ""),
            severity=Severity(d.get("severity", "info")),
            action=Action(d.get("action", "none")),
            message=d.get("message", ""),
            rule=d.get("rule", ""),
        )


_new = tuple.__new__


def node_verdict(
    name: str,
    check: str,
    passed: bool,
    severity: Severity = Severity.INFO,
    action: Action = Action.NONE,
    message: str = "",
    measured: float | None = None,
    threshold: float | None = None,
    unit: str = "",
    rule: str = "",
) -> Verdict:
    """A verdict on node `name` for `check` (its action only when it failed). Built without
    NamedTuple's keyword __new__: a node verdict per check and node, 112,500 at 12,500 nodes."""
    action = action if not passed else Action.NONE
    fields = ("node", name, check, passed, measured, threshold, unit, severity, action, message)
    return _new(Verdict, (*fields, name, rule))


def sort_key(v: Verdict) -> tuple:
    """Failing first, most severe first, then by name."""
    return (v.passed, SEVERITY_RANK[v.severity], v.name, v.check)
