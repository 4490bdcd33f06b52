#!/usr/bin/env python3
"""kiln burn-in per-rail RDMA bandwidth: perftest's ib_write_bw between node pairs, rail by rail.

Standalone: python3 stdlib only (no kiln import, no torch). A round job runs it on every node of
the round (srun, one task per node) after sbcast has copied the round's table to each node:

    srun --ntasks-per-node=1 kiln-burnin ibbw --table /tmp/kiln-ib-123.json --out DIR/ib

The table: {"port": 1, "seconds": 5, "size": 8388608, "pairs": [{"name": "ib-r0-a--b",
"client": "a", "server": "b", "rails": [[0, "mlx5_0", "mlx5_0"], ...]}]}; rails are
[rail, client HCA, server HCA]. A node finds its pair by its Slurm node name. The server runs
`ib_write_bw` on each rail's HCA in turn; the client connects to it by host name (perftest's
TCP exchange) from its own HCA on the same rail and keeps the report as
DIR/<pair>-rail<k>.txt, through a temporary name: a missing report is a failure, never a pass.

Both ends walk the rails in lockstep without a shared clock: rail k listens on TCP port
18515 + k, the client retries connecting for `seconds` + 30 s, the server waits twice that. So
when one end fails a rail, the other still meets it on the next one. A healthy rail costs about
`seconds`; a broken one at most 2 x `seconds` + 70 s. Exit 0 when every rail has a report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TOOL = "ib_write_bw"
BASE_PORT = 18515  # perftest's default; rail k uses BASE_PORT + k
CONNECT_SLACK = 30  # seconds the client keeps retrying beyond the test's own duration


def node_name(env: dict[str, str]) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def my_pair(table: dict, me: str) -> tuple[str, dict] | None:
    """("client" | "server", the pair) for this node; None when it sits this round out."""
    for pair in table["pairs"]:
        if pair["client"] == me:
            return "client", pair
        if pair["server"] == me:
            return "server", pair
    return None


def command(table: dict, hca: str, rail: int, server: str | None = None) -> list[str]:
    """ib_write_bw on one HCA and rail: the largest message for `seconds`, in Gb/s."""
    argv = [
        TOOL,
        "-d", hca,
        "-i", str(table.get("port", 1)),
        "-p", str(BASE_PORT + rail),
        "-F",  # no warning about CPU frequency scaling: it does not limit RDMA writes
        "--report_gbits",
        "-s", str(table.get("size", 8388608)),
        "-D", str(table.get("seconds", 5)),
    ]  # fmt: skip
    return [*argv, server] if server else argv


def serve(table: dict, pair: dict, run=subprocess.run) -> None:
    """The server end: one ib_write_bw per rail, each waiting for its client a bounded time."""
    seconds = int(table.get("seconds", 5))
    wait = 2 * (seconds + CONNECT_SLACK) + 10
    for rail, _, hca in pair["rails"]:
        try:
            run(command(table, hca, rail), stdout=sys.stderr, stderr=sys.stderr, timeout=wait)
        except subprocess.TimeoutExpired:
            print(f"rail {rail}: {hca}: no client test within {wait}s", file=sys.stderr)


def connect(
    table: dict, pair: dict, out: Path, run=subprocess.run, clock=time.monotonic, sleep=time.sleep
) -> list[int]:
    """The client end: a report per rail under `out`; returns the rails left without one."""
    seconds = int(table.get("seconds", 5))
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for rail, hca, _ in pair["rails"]:
        argv = command(table, hca, rail, pair["server"])
        deadline = clock() + seconds + CONNECT_SLACK
        why = ""
        while True:
            try:
                proc = run(argv, capture_output=True, text=True, timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                proc, why = None, f"no report within {seconds + 60}s"
            if proc is not None and proc.returncode == 0 and "#bytes" in proc.stdout:
                dest = out / f"{pair['name']}-rail{rail}.txt"
                tmp = dest.with_name(dest.name + ".tmp")
                tmp.write_text(proc.stdout)
                tmp.replace(dest)
                break
            if proc is not None:
                why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [
                    f"exit {proc.returncode}"
                ]
                why = why[0]
            if clock() >= deadline:
                print(f"rail {rail}: {hca} -> {pair['server']}: {why}", file=sys.stderr)
                missing.append(rail)
                break
            sleep(1)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="the round's table (JSON)")
    parser.add_argument("--out", required=True, help="where the client keeps its reports")
    args = parser.parse_args(argv)
    table = json.loads(Path(args.table).read_text())
    try:
        found = my_pair(table, node_name(dict(os.environ)))
        if found is None:
            return 0
        role, pair = found
        if role == "server":
            serve(table, pair)
            return 0
        missing = connect(table, pair, Path(args.out))
        done = len(pair["rails"]) - len(missing)
        print(f"{pair['name']}: {done} of {len(pair['rails'])} rails measured", file=sys.stderr)
        return 1 if missing else 0
    finally:
        with contextlib.suppress(OSError):
            os.unlink(args.table)  # this node's sbcast copy


if __name__ == "__main__":
    sys.exit(main())
