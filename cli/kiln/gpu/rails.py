"""Rail wiring: does each declared rail's HCA sit next to its GPU?

A rail-optimised server (DGX/HGX H100, H200, B200, A100) gives every GPU its own HCA behind the
same PCIe switch, so GPUDirect RDMA never crosses the CPU: `nvidia-smi topo -m` shows that pair
as PIX or PXB. The inventory declares the HCAs one per rail, in GPU order (`kiln_ib_hcas`), so
rail i belongs to GPU i; where a node has fewer rails than GPUs and they divide evenly (a DGX-2:
16 GPUs, 8 rails), rail i serves the GPUs i*k .. i*k+k-1. A rail whose HCA is further than that
from its GPU is wired (or declared) wrong: NCCL will either pick it for the wrong GPU or push its
traffic across the CPU, and the inter-node bandwidth drops. The verdict names the GPU the HCA is
actually next to.

The node sends `topo -m` packed like the XML (kiln.gpu.facts.unpack); the summary keeps, per NIC,
its path to every GPU, which is all the verdict needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln.gpu.facts import unpack
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi_topo import TopoMatrix, parse_topo, path_rank

# Paths that count as "next to": at most one PCIe bridge, or several without the host bridge.
NEAR_PATHS = ("PIX", "PXB")
# kiln_ib_hcas may name an HCA by GUID or PCI address; topo -m knows device names only.
_DEVICE_NAME = re.compile(r"^[a-z][a-z0-9]*_[\w]+$|^[a-z]+[0-9]+$")


def topology_summary(topo: TopoMatrix) -> dict[str, Any]:
    """The matrix as JSON-ready data: GPU count and, per NIC name, its path to each GPU."""
    return {
        "gpu_count": len(topo.gpus),
        "nic_legend": topo.has_nic_legend,
        "paths": {nic: [topo.gpu_nic(gpu.index, nic) for gpu in topo.gpus] for nic in topo.nics},
        "warnings": list(topo.warnings),
    }


def topology_from_packed(packed: str) -> dict[str, Any] | None:
    """The summary from the module's packed `topo -m`; None when the node sent none, and
    {"error": ...} when kiln cannot read it (the rails are then not judged, never failed)."""
    if not packed:
        return None
    try:
        return topology_summary(parse_topo(unpack(packed)))
    except ParseError as error:
        return {"error": str(error)}


def _gpus(indices: Sequence[int]) -> str:
    return ", ".join(f"GPU{index}" for index in indices)


def _nearest(paths: list[str | None]) -> tuple[str | None, list[int]]:
    known = {index: path for index, path in enumerate(paths) if path is not None}
    if not known:
        return None, []
    best = min(known.values(), key=path_rank)
    return best, [i for i, path in known.items() if path_rank(path) == path_rank(best)]


def _rail_problem(
    rail: int, hca: str, gpus: list[int], paths: list[str | None], near: set[str]
) -> str | None:
    """The sentence for one misplaced rail, or None when it is next to its GPUs."""
    far = [(gpu, paths[gpu]) for gpu in gpus if paths[gpu] not in near]
    if not far:
        return None
    shown = {path for _, path in far}
    path = far[0][1] if len(shown) == 1 else "/".join(sorted(str(p) for p in shown))
    best, nearest = _nearest(paths)
    head = f"rail {rail} ({hca}) is {path} from {_gpus([gpu for gpu, _ in far])}"
    if best in near and not set(nearest) & set(gpus):
        plural = "GPUs are" if len(nearest) > 1 else "GPU is"
        return f"{head}; nearest {plural} {_gpus(nearest)} ({best})"
    return f"{head}; no GPU is closer than {best}: is the HCA in a slot of the right PCIe switch?"


def rail_check(
    topology: dict[str, Any] | None, hcas: Sequence[str], near: Sequence[str] = NEAR_PATHS
) -> dict[str, Any]:
    """Judge the declared rails against the node's `topo -m` summary.

    Returns {"judged": bool, "problems": [...], "notes": [...]}: problems fail preflight, notes
    say what could not be judged and why (no matrix, an HCA named by GUID, an uneven split).
    """
    result: dict[str, Any] = {"judged": False, "problems": [], "notes": []}
    notes: list[str] = result["notes"]
    if not hcas:
        return result
    if topology is None:
        notes.append("nvidia-smi topo -m not read: rail wiring not judged")
        return result
    if "error" in topology:
        notes.append(f"rail wiring not judged: {topology['error']}")
        return result
    gpu_count, rails = topology["gpu_count"], len(hcas)
    if gpu_count == 0 or rails > gpu_count or gpu_count % rails:
        notes.append(f"{rails} rails for {gpu_count} GPUs: rail wiring not judged")
        return result
    share = gpu_count // rails
    allowed = set(near)
    result["judged"] = True
    for rail, hca in enumerate(hcas):
        paths = topology["paths"].get(hca)
        gpus = list(range(rail * share, (rail + 1) * share))
        if paths is None:
            why = (
                "not in nvidia-smi topo -m"
                if _DEVICE_NAME.match(hca)
                else "topo -m names HCAs by device name, not by GUID or PCI address"
            )
            notes.append(f"rail {rail} ({hca}): {why}; not judged")
            continue
        if any(paths[gpu] is None for gpu in gpus):
            notes.append(f"rail {rail} ({hca}): the matrix has no path to {_gpus(gpus)}")
            continue
        problem = _rail_problem(rail, hca, gpus, paths, allowed)
        if problem:
            result["problems"].append(problem)
    return result
