"""Workloads shipped to the nodes: standalone scripts (python3 + torch, stdlib otherwise).

They never import kiln, so the burn-in role copies them as plain files next to whatever torch
the node has (the distribution's on CPU nodes, a pinned CUDA venv or site wheelhouse on GPU
nodes). gemm and allreduce print one JSON document on stdout, which the run record stores as
is; allreduce_launch (stdlib only) is what the jobs run for an all-reduce: nccl-tests where the
nccl stage built it (GPU nodes), else allreduce under srun; ibbw (stdlib only) drives perftest's
ib_write_bw and keeps its reports (see their docstrings).
"""

from __future__ import annotations

from pathlib import Path

WORKLOADS = ("gemm", "allreduce", "allreduce_launch", "ibbw")


def workload_path(name: str) -> Path:
    """The file to copy to the nodes for this workload."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    return Path(__file__).with_name(f"{name}.py")
