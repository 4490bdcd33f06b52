"""The thresholds a node is judged against: its hardware profile's floors, then `kiln_burnin`.

A `kiln_burnin` key overrides the profile only when the inventory sets it (pydantic's
`model_fields_set`): the schema's defaults (10 %) must not silently replace a profile's own
relative limits (the CPU-only profile allows 50 %, shared containers being noisy).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.inventory.schema import BurninSpec
from kiln.profiles import HardwareProfile

_OVERRIDES = {
    "gemm_tflops_floor": "gemm_tflops",
    "allreduce_busbw_floor_gbs": "allreduce_busbw_gbs",
    "gemm_relative_pct": "gemm_relative_pct",
    "node_relative_pct": "node_relative_pct",
}


@dataclass(frozen=True, slots=True)
class Floors:
    profile: str
    gemm_tflops: float  # per GPU; per node (one CPU "device") on CPU-only nodes
    allreduce_busbw_gbs: float | None  # an all-reduce inside one node, and across nodes
    gemm_relative_pct: float  # a GPU this % below the best GPU of its node fails
    node_relative_pct: float  # a node this % below its profile's fleet median fails
    overridden: tuple[str, ...] = ()  # which fields came from kiln_burnin

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "gemm_tflops": self.gemm_tflops,
            "allreduce_busbw_gbs": self.allreduce_busbw_gbs,
            "gemm_relative_pct": self.gemm_relative_pct,
            "node_relative_pct": self.node_relative_pct,
            "overridden": list(self.overridden),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Floors:
        return cls(**{**data, "overridden": tuple(data.get("overridden", ()))})


def floors_for(profile: HardwareProfile, spec: BurninSpec | None = None) -> Floors:
    """The profile's burn-in floors with the inventory's explicit overrides applied."""
    base = profile.burnin_floors
    values = {
        "gemm_tflops": base.gemm_tflops,
        "allreduce_busbw_gbs": base.allreduce_busbw_gbs,
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
