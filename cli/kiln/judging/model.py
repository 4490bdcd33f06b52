"""BurninReport: the verdicts of one burn-in run and the figures the reports plot.

It round-trips through one versioned JSON document (`to_dict`/`from_dict`), stored in the run
record as report.json, so `kiln report RUN` re-renders a run without the inventory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.fabric.bandwidth import RailVerdict
from kiln.judging.results import AllreduceResult, BandwidthRow
from kiln.judging.thresholds import Floors
from kiln.judging.verdicts import Action, Verdict, num, sort_key

SCHEMA_VERSION = 1
NO_IB = "no InfiniBand declared"
# A node the run meant to test but did not: busy with jobs outside the reservation, or its
# result came from another host. Never drained (nothing is known against it); the run is
# incomplete (not passed, exit 1).
NOT_TESTED = "not tested"
NOT_TESTED_BUSY = "not tested (busy)"


@dataclass
class IbSection:
    """The InfiniBand part of a run: every ib_write_bw measurement and the counters that rose.

    The verdicts (ib_hca, ib_bandwidth, ib_link, ib_counters) carry the failures; this keeps
    the figures, as gpu_tflops does for the GEMM, and says why there are none."""

    nodes: list[str] = field(default_factory=list)  # nodes that declare HCAs
    port: int = 1
    note: str = ""  # NO_IB, or why nothing was measured
    links: list[RailVerdict] = field(default_factory=list)  # one per pair and rail
    counter_rises: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # node -> HCA -> error counter -> increase during the run

    def summary(self) -> str:
        if not self.nodes:
            return self.note or NO_IB
        slow = [v for v in self.links if not v.passed]
        text = (
            f"{len(self.nodes)} node(s) with HCAs, {len(self.links)} rail measurement(s), "
            f"{len(slow)} below the floor"
        )
        measured = [v.measured_gbps for v in self.links if v.measured_gbps > 0]
        if measured:
            text += f" (lowest {num(min(measured))} Gb/s)"
        if len(measured) < len(self.links):
            text += f", {len(self.links) - len(measured)} without a report"
        text += f"; error counters rose on {len(self.counter_rises)} node(s)"
        return text + (f"; {self.note}" if self.note else "")

    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "port": self.port,
            "note": self.note,
            "summary": self.summary(),
            "links": [v.to_dict() for v in self.links],
            "counter_rises": self.counter_rises,
        }

    @classmethod
    def from_dict(cls, d: dict) -> IbSection:
        return cls(
            nodes=list(d.get("nodes", [])),
            port=int(d.get("port", 1)),
            note=d.get("note", ""),
            links=[RailVerdict.from_dict(v) for v in d.get("links", [])],
            counter_rises=dict(d.get("counter_rises", {})),
        )


@dataclass
class BurninReport:
    cluster: str
    run_id: str | None = None
    suite: str | None = None
    floors: dict[str, Floors] = field(default_factory=dict)  # by profile id
    node_profiles: dict[str, str] = field(default_factory=dict)  # node -> profile id
    gpu_tflops: dict[str, list[float]] = field(default_factory=dict)  # node -> per device
    allreduce: list[AllreduceResult] = field(default_factory=list)
    pair_threshold_gbs: float | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    ib: IbSection | None = None  # None only in reports stored before kiln judged InfiniBand
    not_tested: dict[str, str] = field(default_factory=dict)  # node -> "not tested (busy): ..."

    @property
    def complete(self) -> bool:
        """Every node the run meant to test was tested."""
        return not self.not_tested

    def sort(self) -> None:
        """Failing verdicts first, most severe first; passing ones keep their (node) order."""
        failing = sorted((v for v in self.verdicts if not v.passed), key=sort_key)
        self.verdicts = failing + [v for v in self.verdicts if v.passed]

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.passed]

    @property
    def passed(self) -> bool:
        return not any(not v.passed for v in self.verdicts)

    def first_failures(self) -> dict[str, str]:
        """Node -> the check of its most severe failing verdict: what its drain reason names
        first, as a word to count failures by (the node lifecycle's failure reasons)."""
        firsts: dict[str, str] = {}
        for v in sorted(self.failures, key=sort_key):
            if v.action is Action.DRAIN and v.node and v.subject != "gpu":
                firsts.setdefault(v.node, v.check)
        return firsts

    def drain(self) -> dict[str, str]:
        """Node -> Slurm drain reason, for every node with a failing `drain` verdict.

        The reason is that of its most severe failing check, plus a count of the others. GPU
        verdicts are details of their node's verdict for the same check and are not counted.
        """
        firsts: dict[str, str] = {}
        counts: dict[str, int] = {}
        for v in sorted(self.failures, key=sort_key):
            if v.action is Action.DRAIN and v.node and v.subject != "gpu":  # gpu: details
                firsts.setdefault(v.node, v.reason)
                counts[v.node] = counts.get(v.node, 0) + 1
        return {
            node: text if counts[node] == 1 else _with_more(text, counts[node] - 1)
            for node, text in firsts.items()
        }

    def to_dict(self) -> dict:
        return {
            "kiln": "burnin-report",
            "schema_version": SCHEMA_VERSION,
            "cluster": self.cluster,
            "run_id": self.run_id,
            "suite": self.suite,
            "passed": self.passed,
            "summary": {
                "nodes": len(self.node_profiles),
                "gpus": sum(len(t) for t in self.gpu_tflops.values()),
                "verdicts": len(self.verdicts),
                "failed": len(self.failures),
                "drain": self.drain(),
                "infiniband": self.ib.summary() if self.ib else None,
                "not_tested": len(self.not_tested),
            },
            "floors": {k: f.to_dict() for k, f in self.floors.items()},
            "node_profiles": self.node_profiles,
            "gpu_tflops": self.gpu_tflops,
            "allreduce": [_allreduce_dict(a) for a in self.allreduce],
            "pair_threshold_gbs": self.pair_threshold_gbs,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "infiniband": self.ib.to_dict() if self.ib else None,
            "not_tested": self.not_tested,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> BurninReport:
        if doc.get("kiln") != "burnin-report":
            raise ValueError("not a kiln burn-in report")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"burn-in report schema {doc.get('schema_version')} is not supported")
        return cls(
            cluster=doc["cluster"],
            run_id=doc.get("run_id"),
            suite=doc.get("suite"),
            floors={k: Floors.from_dict(f) for k, f in doc["floors"].items()},
            node_profiles=dict(doc["node_profiles"]),
            gpu_tflops={k: list(v) for k, v in doc["gpu_tflops"].items()},
            allreduce=[_allreduce_from(a) for a in doc["allreduce"]],
            pair_threshold_gbs=doc.get("pair_threshold_gbs"),
            verdicts=[Verdict.from_dict(v) for v in doc["verdicts"]],
            ib=IbSection.from_dict(doc["infiniband"]) if doc.get("infiniband") else None,
            not_tested=dict(doc.get("not_tested") or {}),
        )


def _with_more(text: str, more: int) -> str:
    suffix = f" (+{more} more)"
    if len(text) + len(suffix) > 99:
        text = text[: 99 - len(suffix) - 3] + "..."
    return text + suffix


def _allreduce_dict(a: AllreduceResult) -> dict:
    return {
        "job": a.job,
        "hosts": list(a.hosts),
        "world_size": a.world_size,
        "implementation": a.implementation,
        "scope": a.scope,
        "ring": a.ring,
        "correct": a.correct,
        "wrong": a.wrong,
        "verdict_bytes": a.verdict_bytes,
        "verdict_busbw_gbs": a.verdict_busbw_gbs,
        "rows": [[r.bytes, r.busbw_gbs, r.algbw_gbs, r.time_us] for r in a.rows],
    }


def _allreduce_from(d: dict) -> AllreduceResult:
    return AllreduceResult(
        job=d["job"],
        hosts=tuple(d["hosts"]),
        world_size=d["world_size"],
        implementation=d.get("implementation") or d.get("source") or "torch",  # "source": older
        rows=tuple(BandwidthRow(int(b), bus, alg, t) for b, bus, alg, t in d["rows"]),
        verdict_bytes=d["verdict_bytes"],
        verdict_busbw_gbs=d["verdict_busbw_gbs"],
        correct=d["correct"],
        ring=d.get("ring", False),
        wrong=int(d.get("wrong") or 0),
    )
