"""Per-rail RDMA bandwidth for burn-in: ib_write_bw between node pairs, judged per rail.

Each measurement is one `ib_write_bw` run between two nodes on one rail (the same HCA index on
both ends), parsed by kiln.parsers.ib_write_bw. It is judged on the average bandwidth of its
largest message size against a floor that is a share of the rail's line rate: at least 90% of
400 Gb/s for NDR by default (a healthy ConnectX-7 on PCIe Gen5 reaches ~97-98%; a link that
trained at a lower speed or width, or a card in a degraded PCIe slot, falls well below).

Burn-in (kiln.burnin.ib) runs the pairs through Slurm and calls `judge_rail`; this module only
judges.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.parsers.ib_write_bw import IbWriteBwResult

# Line rate of a 4x link in Gb/s by InfiniBand speed name (what `ibstat` prints as Rate).
LINE_RATE_GBPS = {"XDR": 800, "NDR": 400, "HDR": 200, "EDR": 100, "FDR": 56, "QDR": 40}

# Share of the line rate a healthy rail reaches, per line rate; others use DEFAULT_FLOOR_PCT.
FLOOR_PCT = {800: 90.0, 400: 90.0, 200: 90.0, 100: 90.0}
DEFAULT_FLOOR_PCT = 85.0


def floor_gbps(link_rate_gbps: float, floor_pct: float | None = None) -> float:
    """The least bandwidth a rail at this line rate must reach, in Gb/s."""
    pct = (
        floor_pct
        if floor_pct is not None
        else FLOOR_PCT.get(int(link_rate_gbps), DEFAULT_FLOOR_PCT)
    )
    return link_rate_gbps * pct / 100.0


@dataclass(frozen=True, slots=True)
class RailMeasurement:
    rail: int
    client: str  # host name
    server: str
    hca: str | None  # the device ib_write_bw used (from its report, else as declared)
    result: IbWriteBwResult
    peer_hca: str | None = None  # the server's device on the same rail


@dataclass(frozen=True, slots=True)
class RailVerdict:
    rail: int
    client: str
    server: str
    hca: str | None
    measured_gbps: float
    floor_gbps: float
    link_rate_gbps: float
    passed: bool
    reason: str
    peer_hca: str | None = None

    def to_dict(self) -> dict:
        return {
            "rail": self.rail,
            "client": self.client,
            "server": self.server,
            "hca": self.hca,
            "peer_hca": self.peer_hca,
            "measured_gbps": round(self.measured_gbps, 2),
            "floor_gbps": round(self.floor_gbps, 2),
            "link_rate_gbps": self.link_rate_gbps,
            "passed": self.passed,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: dict) -> RailVerdict:
        return cls(
            d["rail"], d["client"], d["server"], d.get("hca"), float(d["measured_gbps"]),
            float(d["floor_gbps"]), float(d["link_rate_gbps"]), bool(d["passed"]),
            d.get("reason", ""), d.get("peer_hca"),
        )  # fmt: skip


def judge_rail(
    measurement: RailMeasurement, link_rate_gbps: float, floor_pct: float | None = None
) -> RailVerdict:
    """Pass when the largest message's average bandwidth reaches the floor."""
    row = measurement.result.largest
    floor = floor_gbps(link_rate_gbps, floor_pct)
    measured = row.bw_average_gbps
    hca = measurement.result.device or measurement.hca
    where = (
        f"rail {measurement.rail} ({hca or 'HCA ?'}) {measurement.client} -> {measurement.server}"
    )
    pct = 100.0 * measured / link_rate_gbps
    if measured >= floor:
        reason = f"{where}: {measured:.1f} Gb/s, {pct:.0f}% of {link_rate_gbps:g} Gb/s"
    else:
        reason = (
            f"{where}: {measured:.1f} Gb/s at {row.bytes} B is below the floor {floor:.1f} Gb/s "
            f"({pct:.0f}% of {link_rate_gbps:g} Gb/s)"
        )
    return RailVerdict(
        measurement.rail, measurement.client, measurement.server, hca,
        measured, floor, link_rate_gbps, measured >= floor, reason, measurement.peer_hca,
    )  # fmt: skip
