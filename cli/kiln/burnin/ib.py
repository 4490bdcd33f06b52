"""InfiniBand in burn-in: the HCAs before and after, and ib_write_bw per rail between node pairs.

    views = parse_sysfs_dump(text)            # each HCA node's sysfs dump (kiln.fabric.links)
    rounds = plan_rounds(hcas, views, ...)    # rounds of IbPairs: who meets whom, on which rails
    ib = load_ib(run_dir, manifest)           # what the run recorded, for the judge

Before the jobs kiln reads every node that declares HCAs over SSH, the same sysfs dump the
infiniband role reads: it resolves each declared rail (a name, GUID or PCI address) to the HCA
name ib_write_bw needs and says which ports are up; read again after the jobs, the two dumps
give the error counters that rose during burn-in. The pairs come from the pairwise pass's
schedule (kiln.burnin.pairs), at most three rounds, so every node meets two or three peers and a
bad HCA (slow with every peer) is told from a bad link (slow with one). Each pair runs its rails
one at a time, the same rail at both ends (workloads/ibbw.py), one Slurm job per round.

Run record: ib/sysfs-before/<node>.txt, ib/sysfs-after/<node>.txt (the dumps),
ib/<pair>-rail<k>.txt (the client's ib_write_bw report); the manifest's "ib" entry lists the
nodes and pairs, so a report that is missing is a failure, never a smaller run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiln.burnin.pairs import default_rounds, pair_schedule
from kiln.fabric.links import HcaView, check_rails
from kiln.parsers import ParseError
from kiln.parsers.ib_write_bw import IbWriteBwResult, parse_ib_write_bw

PORT = 1  # the HCA port, as the infiniband role's infiniband_port default
MAX_ROUNDS = 3  # two to three peers per node tell a bad HCA from a bad link
DEFAULT_RATE_GBPS = 400.0  # when neither the inventory nor the port tells the rate
MESSAGE_BYTES = 8388608  # the largest size of `ib_write_bw -a`: where a rail reaches line rate


@dataclass(frozen=True, slots=True)
class IbRail:
    rail: int
    client_hca: str
    server_hca: str
    link_rate_gbps: float


@dataclass(frozen=True, slots=True)
class IbPair:
    name: str  # ib-r<round>-<client>--<server>
    client: str
    server: str
    rails: tuple[IbRail, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "client": self.client,
            "server": self.server,
            "rails": [[r.rail, r.client_hca, r.server_hca, r.link_rate_gbps] for r in self.rails],
        }

    @classmethod
    def from_dict(cls, d: dict) -> IbPair:
        rails = tuple(IbRail(int(r), a, b, float(rate)) for r, a, b, rate in d["rails"])
        return cls(d["name"], d["client"], d["server"], rails)


def pair_name(round_: int, client: str, server: str) -> str:
    return f"ib-r{round_}-{client}--{server}"


def usable_rails(
    declared: Sequence[str], views: list[HcaView], port: int = PORT
) -> dict[int, tuple[str, float | None]]:
    """Rail -> (HCA name, port rate) for the declared rails whose HCA is there and whose port is
    Active/LinkUp InfiniBand; the others cannot carry a test (their ib_hca verdict says why)."""
    rates = {(v.name, p.number): p.rate_gbps for v in views for p in v.ports}
    return {
        rail.rail: (rail.hca, rates.get((rail.hca, port)))
        for rail in check_rails(list(declared), views, None, port)
        if rail.hca is not None and rail.ok
    }


def plan_rounds(
    declared: Mapping[str, Sequence[str]],
    views: Mapping[str, list[HcaView]],
    *,
    link_rate_gbps: float | None,
    port: int = PORT,
    rounds: int | None = None,
) -> list[list[IbPair]]:
    """Rounds of disjoint node pairs, each pair with the rails both ends can test.

    `declared`: node -> its kiln_ib_hcas; `views`: node -> its HCAs as read (nodes not read are
    left out). The line rate is the inventory's, else the slower end's port rate."""
    rails_of = {n: usable_rails(declared[n], views[n], port) for n in declared if n in views}
    nodes = [n for n in declared if rails_of.get(n)]
    count = min(MAX_ROUNDS, default_rounds(len(nodes))) if rounds is None else rounds
    planned = []
    for k, matches in enumerate(pair_schedule(nodes, count)):
        pairs = []
        for a, b in matches:
            rails = []
            for rail in sorted(set(rails_of[a]) & set(rails_of[b])):
                (hca_a, rate_a), (hca_b, rate_b) = rails_of[a][rail], rails_of[b][rail]
                seen = [r for r in (rate_a, rate_b) if r]
                rate = link_rate_gbps or (min(seen) if seen else DEFAULT_RATE_GBPS)
                rails.append(IbRail(rail, hca_a, hca_b, float(rate)))
            if rails:
                pairs.append(IbPair(pair_name(k, a, b), a, b, tuple(rails)))
        if pairs:
            planned.append(pairs)
    return planned


def table(pairs: Sequence[IbPair], seconds: int, port: int = PORT) -> dict:
    """The round's table for workloads/ibbw.py."""
    return {
        "port": port,
        "seconds": seconds,
        "size": MESSAGE_BYTES,
        "pairs": [
            {
                "name": p.name,
                "client": p.client,
                "server": p.server,
                "rails": [[r.rail, r.client_hca, r.server_hca] for r in p.rails],
            }
            for p in pairs
        ],
    }


# --- the run record ------------------------------------------------------------------------


def sysfs_path(root: Path, node: str, phase: str) -> Path:
    """phase: "before" or "after" the jobs."""
    return root / "ib" / f"sysfs-{phase}" / f"{node}.txt"


def report_path(root: Path, pair: str, rail: int) -> Path:
    return root / "ib" / f"{pair}-rail{rail}.txt"


def manifest_entry(nodes: Sequence[str], pairs: Sequence[IbPair], port: int = PORT) -> dict:
    return {"nodes": list(nodes), "port": port, "pairs": [p.to_dict() for p in pairs]}


@dataclass
class IbRun:
    nodes: tuple[str, ...]  # the run's nodes that declare HCAs
    port: int = PORT
    pairs: list[IbPair] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)  # node -> sysfs dump (when read)
    after: dict[str, str] = field(default_factory=dict)
    reports: dict[tuple[str, int], IbWriteBwResult | str] = field(default_factory=dict)
    # (pair, rail) -> the parsed report, or why there is none


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def load_ib(root: Path, manifest: dict) -> IbRun | None:
    """The InfiniBand part of a run record; None when the run had no node with HCAs."""
    entry = manifest.get("ib") or {}
    if not entry.get("nodes"):
        return None
    run = IbRun(tuple(entry["nodes"]), int(entry.get("port", PORT)))
    run.pairs = [IbPair.from_dict(p) for p in entry.get("pairs", [])]
    for node in run.nodes:
        for phase, into in (("before", run.before), ("after", run.after)):
            text = _read(sysfs_path(root, node, phase))
            if text is not None:
                into[node] = text
    for pair in run.pairs:
        for rail in pair.rails:
            text = _read(report_path(root, pair.name, rail.rail))
            if text is None:
                why = "no report: ib_write_bw failed, or the job timed out"
                run.reports[(pair.name, rail.rail)] = why
                continue
            try:
                run.reports[(pair.name, rail.rail)] = parse_ib_write_bw(text)
            except ParseError as error:
                run.reports[(pair.name, rail.rail)] = f"unreadable report ({error})"
    return run
