#!/usr/bin/env python3
"""kiln burn-in all-reduce: torch.distributed over a size sweep, algbw and busbw per size.

Standalone: python3 + torch, stdlib otherwise (no kiln import). NCCL on GPUs, gloo on CPU-only
nodes. Launch one process per GPU (or one per CPU node) with torchrun, or with Slurm's srun:

    torchrun --nproc-per-node 8 allreduce.py                   # inside one node (NVLink)
    srun -N16 --ntasks-per-node 8 python3 allreduce.py --ring  # across nodes, ring forced

Rank and rendezvous come from RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (torchrun)
or else SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODELIST (the first host of the hostlist
becomes the master; the port is derived from SLURM_JOB_ID so concurrent jobs do not collide).
Timing follows nccl-tests: warm-up, then `iters` back-to-back all-reduces, time = the slowest
rank's mean; algbw = bytes / time; busbw = algbw x 2(n-1)/n. Rank 0 prints one JSON document
(implementation "torch"). Burn-in jobs start it through allreduce_launch.py, which runs nccl-tests
instead on GPU nodes where the nccl stage built it; this stays the CPU path and the fallback.
`--ring` sets NCCL_ALGO=Ring so network gates measure the ring, not tree or NVLS shortcuts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
import warnings
from datetime import timedelta

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SCHEMA_VERSION = 1
# Printed when the ranks could not connect (allreduce_launch.py starts them again once on it; the
# same words there): a 32-rank gloo ring on Debian 13's torch failed its full-mesh connect in one
# run of two on the sandbox; gloo itself retries connections only since 2025.
RENDEZVOUS_FAILED = "allreduce: the ranks could not connect"
_GROUP = re.compile(r"\[([^\]]*)\]")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: 'gpu[007-009,012],cpu1' -> 'gpu007'."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            end = i
            break
    head = nodelist[:end].strip()

    def first(match: re.Match[str]) -> str:
        return match.group(1).split(",")[0].split("-")[0].strip()

    return _GROUP.sub(first, head)


def libuv_store_missing() -> bool:
    """Whether this torch asks for its libuv TCPStore by default but was built without libuv.

    Torch 2.4+ rendezvous through the libuv store unless USE_LIBUV=0; Debian 13's torch 2.6 is
    built without it, and every rank then fails in init_process_group ("use_libuv was requested
    but PyTorch was build without libuv support"). Older torch has no such store to choose.
    """
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True)
    except TypeError:  # torch < 2.2: no use_libuv argument, one store implementation
        return False
    except RuntimeError as error:
        return "libuv" in str(error)
    return False


def rendezvous(env: dict[str, str]) -> dict[str, str | int]:
    """rank, world_size, local_rank, master_addr, master_port from torchrun's or Slurm's env."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return {
            "rank": int(env["RANK"]),
            "world_size": int(env["WORLD_SIZE"]),
            "local_rank": int(env.get("LOCAL_RANK", "0")),
            "master_addr": env.get("MASTER_ADDR", "127.0.0.1"),
            "master_port": int(env.get("MASTER_PORT", "29500")),
        }
    if "SLURM_PROCID" in env:
        job = int(env.get("SLURM_JOB_ID", "0") or 0)
        return {
            "rank": int(env["SLURM_PROCID"]),
            "world_size": int(env.get("SLURM_NTASKS", "1")),
            "local_rank": int(env.get("SLURM_LOCALID", "0")),
            "master_addr": env.get("MASTER_ADDR") or first_host(env.get("SLURM_NODELIST", "")),
            "master_port": int(env.get("MASTER_PORT") or 20000 + job % 20000),
        }
    return {
        "rank": 0,
        "world_size": 1,
        "local_rank": 0,
        "master_addr": "127.0.0.1",
        "master_port": 29500,
    }


def busbw(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else algbw


def four_figures(gbs: float) -> float:
    """A rate to four significant figures, not four decimals: a shaped link in the sandbox
    moves a few MB/s, where four decimals of GB/s keep one or two figures."""
    return float(f"{gbs:.4g}")


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    out, size = [], max(min_bytes, 1)
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def time_size(tensor: torch.Tensor, warmup: int, iters: int, device: torch.device) -> float:
    """Seconds per all-reduce, the slowest rank's mean."""
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    elapsed = elapsed.to(device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def check_sum(size: int, elem: int, rank: int, world: int, device: torch.device) -> bool:
    """All-reduce rank+1 everywhere; every element must be exactly n(n+1)/2."""
    tensor = torch.full((max(1, size // elem),), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    return bool((tensor == expected).all().item())


def gather_hostnames(world: int, device: torch.device) -> list[str]:
    """Every rank's short host name, in rank order (without pickling: no numpy needed)."""
    name = socket.gethostname().split(".")[0].encode()[:255]
    mine = torch.zeros(256, dtype=torch.uint8)
    mine[: len(name)] = torch.tensor(list(name), dtype=torch.uint8)
    mine = mine.to(device)
    everyone = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    return [bytes(t.cpu().tolist()).rstrip(b"\0").decode() for t in everyone]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kiln burn-in: all-reduce bandwidth sweep")
    parser.add_argument("--min-bytes", type=int, default=None, help="GPU 1 MiB, CPU 1 KiB")
    parser.add_argument("--max-bytes", type=int, default=None, help="GPU 1 GiB, CPU 16 MiB")
    parser.add_argument(
        "--verdict-bytes",
        type=int,
        default=None,
        help="the size the verdict is taken at (default: --max-bytes)",
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--ring", action="store_true", help="force NCCL_ALGO=Ring")
    parser.add_argument("--timeout", type=float, default=600, help="collective timeout, s")
    args = parser.parse_args(argv)
    if args.ring:
        os.environ["NCCL_ALGO"] = "Ring"  # read by NCCL at communicator creation
    rdv = rendezvous(dict(os.environ))
    cuda = args.backend != "gloo" and torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if args.backend == "nccl" and not cuda:
        print("allreduce: --backend nccl but torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", int(rdv["local_rank"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    min_bytes = args.min_bytes or (1 << 20 if cuda else 1 << 10)
    max_bytes = args.max_bytes or (1 << 30 if cuda else 16 << 20)
    verdict_bytes = args.verdict_bytes or max_bytes
    rank, world = int(rdv["rank"]), int(rdv["world_size"])
    if "USE_LIBUV" not in os.environ and libuv_store_missing():
        os.environ["USE_LIBUV"] = "0"  # every rank runs the same torch, so all choose alike
    try:  # the ranks connecting: a failure here is the rendezvous', not a measurement
        dist.init_process_group(
            backend,
            init_method=f"tcp://{rdv['master_addr']}:{rdv['master_port']}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=args.timeout),
        )
        hosts = gather_hostnames(world, device)
    except RuntimeError as exc:  # torch's DistError, DistNetworkError, gloo's connect errors
        print(f"{RENDEZVOUS_FAILED} (rank {rank} of {world}): {exc}", file=sys.stderr)
        if dist.is_initialized():
            dist.destroy_process_group()
        return 75  # EX_TEMPFAIL
    try:
        dtype = getattr(torch, args.dtype)
        elem = torch.tensor([], dtype=dtype).element_size()
        rows = []
        for size in sorted(set(sizes(min_bytes, max_bytes)) | {verdict_bytes}):
            count = max(1, size // elem)
            tensor = torch.zeros(count, dtype=dtype, device=device)
            seconds = time_size(tensor, args.warmup, args.iters, device)
            algbw = count * elem / seconds / 1e9
            rows.append(
                {
                    "bytes": count * elem,
                    "count": count,
                    "time_us": round(seconds * 1e6, 2),
                    "algbw_gbs": four_figures(algbw),
                    "busbw_gbs": four_figures(busbw(algbw, world)),
                }
            )
            del tensor
        correct = check_sum(verdict_bytes, 4, rank, world, device)
        flags = torch.tensor([0 if correct else 1], device=device)
        dist.all_reduce(flags)
        verdict = next(r for r in rows if r["bytes"] == max(1, verdict_bytes // elem) * elem)
        doc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "allreduce",
            "implementation": "torch",
            "hostname": hosts[0],
            "hosts": hosts,
            "world_size": world,
            "backend": backend,
            "nccl_algo": os.environ.get("NCCL_ALGO") if cuda else None,
            "dtype": args.dtype,
            "warmup": args.warmup,
            "iters": args.iters,
            "torch_version": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "rows": rows,
            "verdict_bytes": verdict["bytes"],
            "verdict_busbw_gbs": verdict["busbw_gbs"],
            "correct": int(flags.item()) == 0,
            "wrong": 0,  # nccl-tests' #wrong column; torch checks one exact sum (`correct`)
        }
        if rank == 0:
            json.dump(doc, sys.stdout, indent=1)
            sys.stdout.write("\n")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
