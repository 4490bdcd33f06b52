"""What burn-in recorded of InfiniBand, as judged by kiln.judging.rules_ib.

An IbPair is two nodes that ran ib_write_bw rail by rail (the campaign plans them:
kiln.burnin.ib); an IbRun holds a run's pairs with the HCAs' sysfs dumps before and after the
jobs and each rail's parsed report (kiln.records.burnin.load_ib reads them from the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.parsers.ib_write_bw import IbWriteBwResult

PORT = 1  # the HCA port, as the infiniband role's infiniband_port default


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


@dataclass
class IbRun:
    nodes: tuple[str, ...]  # the run's nodes that declare HCAs
    port: int = PORT
    pairs: list[IbPair] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)  # node -> sysfs dump (when read)
    after: dict[str, str] = field(default_factory=dict)
    reports: dict[tuple[str, int], IbWriteBwResult | str] = field(default_factory=dict)
    # (pair, rail) -> the parsed report, or why there is none
