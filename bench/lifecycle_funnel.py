"""Benchmark: the bring-up funnel of 12,500 nodes (issue 33's goal: under a second from the
shared state).

A bring-up log of 12,500 nodes over 19 days (the shape tests/unit/test_lifecycle.py generates:
racks arriving 1,000 nodes a day, a burn-in queue of one to three days, 6 % failing and coming
back through triage, RMA and replacement), serialised as JSON lines, one event per line. Paired
in one run, per repeat:

  baseline   json.loads of every line: reading the log from the shared state
  read       the same lines read into events (kiln.lifecycle.log), replayed in log order and
             summed up (kiln.lifecycle.funnel): what `kiln funnel` pays after fetching the log
  whole      the log read from a state directory through the shell kiln sends the controller
             (kiln.state.lifecycle, a local bash standing in for SSH), replayed and summed up

Printed: min and median of each, the ratio (median), and the funnel's slowest step.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from kiln.lifecycle import funnel, replay
from kiln.lifecycle.log import read_lines
from kiln.state.lifecycle import LifecycleLog
from kiln.state.remote import LocalRemote

HOUR = 3600.0
T0 = 1_761_955_200.0  # 2025-11-01T00:00:00Z
NOW = T0 + 19 * 24 * HOUR
REASONS = ["gemm below floor"] * 5 + ["xid 79 (fallen off the bus)"] * 3 + ["ib link down"] * 2


def bring_up_log(nodes: int, seed: int = 33) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for index in range(nodes):
        at = T0 + (index // 1000) * 24 * HOUR + rng.uniform(0, 8) * HOUR
        path = [("declared", at, "")]
        for state, hours in (("reachable", (1, 6)), ("provisioned", (2, 10)),
                             ("quarantined", (1, 3))):  # fmt: skip
            at += rng.uniform(*hours) * HOUR
            path.append((state, at, "run"))
        at += rng.uniform(24, 72) * HOUR
        if rng.random() < 0.06:
            for state, hours, why in (("failed", (0, 0), rng.choice(REASONS)),
                                      ("triage", (2, 12), "triage"), ("rma", (4, 24), "rma"),
                                      ("replaced", (48, 120), "new tray"),
                                      ("quarantined", (1, 4), "identity changed")):  # fmt: skip
                at += rng.uniform(*hours) * HOUR
                path.append((state, at, why))
            at += rng.uniform(24, 72) * HOUR
        path += [("burned_in", at, "pass"), ("in_service", at + rng.uniform(0.1, 1) * HOUR, "")]
        for state, when, why in path:
            if when <= NOW:
                doc = {"v": 1, "node": f"gpu{index:05d}", "at": when, "to": state,
                       "evidence": why, "identity_change": why == "identity changed"}  # fmt: skip
                lines.append(json.dumps(doc))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lines = bring_up_log(args.nodes)
    with tempfile.TemporaryDirectory() as directory:
        # The log where a cluster keeps it, read through the shell kiln sends the controller
        # (here a local bash: kiln.state.remote.LocalRemote, no network in the figure).
        Path(directory, "lifecycle.jsonl").write_text("".join(line + "\n" for line in lines))
        log = LifecycleLog(LocalRemote("bench"), directory)
        baseline, parsed, whole, slowest = [], [], [], None
        for _ in range(args.repeats):
            start = time.perf_counter()
            documents = [json.loads(line) for line in lines]
            baseline.append(time.perf_counter() - start)
            start = time.perf_counter()
            report = funnel(replay(read_lines(lines, "bench"), in_order=True))
            parsed.append(time.perf_counter() - start)
            start = time.perf_counter()
            report = funnel(log.lives())
            whole.append(time.perf_counter() - start)
            slowest = report.slowest
            del documents
    print(f"lifecycle funnel: {args.nodes} nodes, {len(lines)} events, {args.repeats} repeats")
    for name, times in (("baseline json.loads", baseline), ("read + replay + funnel", parsed),
                        ("from the state dir", whole)):  # fmt: skip
        ratio = statistics.median(m / b for m, b in zip(times, baseline, strict=True))
        print(f"  {name:24} min {min(times):.3f}s  median {statistics.median(times):.3f}s  "
              f"{ratio:.1f}x the baseline")  # fmt: skip
    print(f"  slowest step: {slowest}")
    met = statistics.median(whole) < 1.0
    print(f"  goal: under 1 s from the shared state -> {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
