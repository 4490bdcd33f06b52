"""The thresholds a node is judged against: its hardware profile's floors, then `kiln_burnin`.

A `kiln_burnin` key overrides the profile only when the inventory sets it (pydantic's
`model_fields_set`): the schema's defaults (10 %) must not silently replace a profile's own
relative limits (the CPU-only profile allows 50 %, shared containers being noisy).

All-reduce floors go by scope, and every verdict names the rule that set its threshold:

  intra-node floor           inside one node: the profile's NVLink or PCIe figure
                             (`burnin_floors.allreduce_busbw_gbs`, `allreduce_busbw_floor_gbs`)
  rails x rate x efficiency  across nodes: what the slowest node's network carries one way,
                             rails (len(kiln_ib_hcas)) x kiln_ib.link_rate_gbps / 8 bits, times
                             an efficiency (0.75, `allreduce_fabric_efficiency`). nccl-tests'
                             busbw = algbw x 2(n-1)/n is what each rank sends on its ring link;
                             a ring spanning nodes leaves each node through its NICs with that
                             same amount, so busbw cannot pass rails x rate / 8 (8 x 400 Gb/s:
                             400 GB/s; NVIDIA measures ~46-48 GB/s a 400G NIC). Judged at
                             FABRIC_BYTES, where a ring of hundreds of nodes is at its plateau.
  fleet-relative             across nodes where a node declares no rails (or no line rate is
                             set): no absolute floor; the pairwise pass compares pairs with the
                             fleet's median (`node_relative_pct`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kiln.inventory.model import Cluster, Node
from kiln.inventory.schema import BurninSpec
from kiln.judging.table import FABRIC_BYTES as FABRIC_BYTES  # defined beside the rows
from kiln.profiles import HardwareProfile

INTRA_NODE = "intra-node floor"
RAILS = "rails x rate x efficiency"
FLEET = "fleet-relative"
NVLINK_DOMAIN = "NVLink domain floor"
DOMAIN_JOB = "domain-"  # an all-reduce across one NVLink domain: "domain-" + its name
DEFAULT_EFFICIENCY = 0.75

_OVERRIDES = {
    "gemm_tflops_floor": "gemm_tflops",
    "allreduce_busbw_floor_gbs": "allreduce_busbw_gbs",
    "allreduce_fabric_efficiency": "allreduce_fabric_efficiency",
    "gemm_relative_pct": "gemm_relative_pct",
    "node_relative_pct": "node_relative_pct",
}


@dataclass(frozen=True, slots=True)
class Floors:
    profile: str
    gemm_tflops: float  # per GPU; per node (one CPU "device") on CPU-only nodes
    allreduce_busbw_gbs: float | None  # an all-reduce inside one node (the intra-node floor)
    gemm_relative_pct: float  # a GPU this % below the best GPU of its node fails
    node_relative_pct: float  # a node this % below its profile's fleet median fails
    overridden: tuple[str, ...] = ()  # which fields came from kiln_burnin
    allreduce_fabric_efficiency: float = DEFAULT_EFFICIENCY  # share of rails x rate across nodes
    allreduce_domain_busbw_gbs: float | None = None  # across an NVLink domain (an NVL72 rack)

    def to_dict(self) -> dict:
        doc = {
            "profile": self.profile,
            "gemm_tflops": self.gemm_tflops,
            "allreduce_busbw_gbs": self.allreduce_busbw_gbs,
            "allreduce_fabric_efficiency": self.allreduce_fabric_efficiency,
            "gemm_relative_pct": self.gemm_relative_pct,
            "node_relative_pct": self.node_relative_pct,
            "overridden": list(self.overridden),
        }
        if self.allreduce_domain_busbw_gbs is not None:  # rack-scale profiles only
            doc["allreduce_domain_busbw_gbs"] = self.allreduce_domain_busbw_gbs
        return doc

    @classmethod
    def from_dict(cls, data: dict) -> Floors:
        return cls(**{**data, "overridden": tuple(data.get("overridden", ()))})


def floors_for(profile: HardwareProfile, spec: BurninSpec | None = None) -> Floors:
    """The profile's burn-in floors with the inventory's explicit overrides applied."""
    base = profile.burnin_floors
    values = {
        "gemm_tflops": base.gemm_tflops,
        "allreduce_busbw_gbs": base.allreduce_busbw_gbs,
        "allreduce_fabric_efficiency": DEFAULT_EFFICIENCY,
        "allreduce_domain_busbw_gbs": base.allreduce_domain_busbw_gbs,
        "gemm_relative_pct": base.gemm_relative_pct,
        "node_relative_pct": base.node_relative_pct,
    }
    overridden = []
    if spec is not None:
        for key in sorted(spec.model_fields_set & _OVERRIDES.keys()):
            value = getattr(spec, key)
            if value is not None:
                values[_OVERRIDES[key]] = value
                overridden.append(_OVERRIDES[key])
    return Floors(profile=profile.id, overridden=tuple(overridden), **values)


@dataclass(frozen=True, slots=True)
class ScopeFloor:
    """The floor of one all-reduce and the rule it comes from; gbs None: no absolute floor."""

    gbs: float | None
    rule: str  # INTRA_NODE, RAILS, FLEET or NVLINK_DOMAIN
    basis: str = ""  # how: "8 x 400 Gb/s x 0.75"; or why there is none


def node_network_gbs(rails: int, link_rate_gbps: float) -> float:
    """What a node's rails carry one way, in GB/s: rails x line rate (Gb/s) / 8 bits."""
    return rails * link_rate_gbps / 8


def domain_floor(floors: Floors) -> ScopeFloor:
    """An all-reduce across the trays of one NVLink domain: the profile's rack-scale floor."""
    return ScopeFloor(floors.allreduce_domain_busbw_gbs, NVLINK_DOMAIN, floors.profile)


def intra_node_floor(floors: Floors) -> ScopeFloor:
    basis = "kiln_burnin" if "allreduce_busbw_gbs" in floors.overridden else floors.profile
    return ScopeFloor(floors.allreduce_busbw_gbs, INTRA_NODE, basis)


def inter_node_floor(
    nodes: Iterable[Node], link_rate_gbps: float | None, efficiency: float = DEFAULT_EFFICIENCY
) -> ScopeFloor:
    """A ring across these nodes: bounded by the node with the fewest rails."""
    rails = {n.name: len(n.ib_hcas) for n in nodes}
    bare = sorted(name for name, count in rails.items() if count == 0)
    if not rails:
        return ScopeFloor(None, FLEET, "no node of the inventory")
    if bare:
        more = f" (+{len(bare) - 1} more)" if len(bare) > 1 else ""
        return ScopeFloor(None, FLEET, f"{bare[0]}{more} declares no rails (kiln_ib_hcas)")
    if not link_rate_gbps:
        return ScopeFloor(None, FLEET, "kiln_ib.link_rate_gbps is not set")
    fewest = min(rails.values())
    gbs = node_network_gbs(fewest, link_rate_gbps) * efficiency
    return ScopeFloor(gbs, RAILS, f"{fewest} x {link_rate_gbps:g} Gb/s x {efficiency:g}")


def fabric_floor(cluster: Cluster, hosts: Iterable[str]) -> ScopeFloor:
    """The floor of an all-reduce across these hosts (names of the inventory)."""
    by_name = {n.name: n for n in cluster.compute}
    nodes = [by_name[h] for h in hosts if h in by_name]
    efficiency = cluster.burnin.allreduce_fabric_efficiency or DEFAULT_EFFICIENCY
    return inter_node_floor(nodes, cluster.ib.link_rate_gbps, efficiency)
