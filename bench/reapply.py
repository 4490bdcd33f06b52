"""Benchmark: a converged re-apply (drift-aware) beside `kiln provision --full`; its cost at scale.

1. On the sandbox (`kiln sandbox up --nodes 2`, provisioned once: the first run below converges
   it): REPEATS pairs of `kiln provision INVENTORY` (drift-aware) and `kiln provision INVENTORY
   --full`, in alternating order, each a fresh `kiln` process as a user runs it. Checked: every
   run exits 0, the drift-aware run skips every node-stage ("unchanged"), the --full run changes
   nothing (the sandbox is converged, so both leave it the same). Printed: min and median of each,
   the ratio --full / drift-aware per pair (median), and the goals (drift-aware under 15 s and at
   least 5x faster than --full).
2. The controller's side at 12,500 nodes, without SSH: a generated inventory's plan, every node's
   fingerprints and the assessment over probes that all match (what a converged fleet answers).
3. The probe's controller cost per node over real SSH: the probe (kiln.drift.probe_nodes) against
   light sandbox hosts (kiln.sandbox.light, --probe-hosts, 100 by default; they hold no record, so
   each answers "no record" after the same SSH session and program run as a converged node's).

Then the projection for 12,500 nodes on a 64-core controller (docs/scale.md explains it).

    python bench/reapply.py inventories/sandbox
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.drift import assess, probe_nodes
from kiln.drift.remote import NodeProbe
from kiln.examples import write_example
from kiln.inventory import require_valid
from kiln.plan import PlanOptions, make_plan
from kiln.plan.fingerprint import fingerprints
from kiln.sandbox import config, light

BIN = Path(sys.executable).parent
FLEET = 12_500
CORES = 64
FANOUT = 64  # kiln.drift.probe_nodes' sessions in flight
FANOUT_ALONE = 9  # sessions measured one at a time


def provision(inventory: Path, *extra: str) -> tuple[float, dict]:
    start = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "kiln"), "provision", str(inventory), "--yes", "--json", *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"kiln provision {' '.join(extra)} exited {proc.returncode}:\n"
                         f"{proc.stderr[-2000:]}")  # fmt: skip
    return wall, json.loads(proc.stdout)


def sandbox_pairs(inventory: Path, repeats: int) -> dict:
    print("converging the sandbox first (a drift-aware provision) ...", file=sys.stderr)
    provision(inventory)
    drift, full = [], []
    for repeat in range(repeats):
        order = ("drift", "full") if repeat % 2 == 0 else ("full", "drift")
        for kind in order:
            wall, summary = provision(inventory, *(("--full",) if kind == "full" else ()))
            if kind == "drift":
                ran = [h for h, stages in summary.get("hosts", {}).items() if stages]
                assert not ran, f"a converged re-apply ran stages on {ran}"
                drift.append(wall)
            else:
                assert summary["changed"] == 0, f"--full changed {summary['changed']} tasks"
                full.append(wall)
            print(f"  pair {repeat + 1} {kind:<5} {wall:6.1f} s", file=sys.stderr)
    ratios = [f / d for f, d in zip(full, drift, strict=True)]
    return {"drift_s": drift, "full_s": full, "ratio": statistics.median(ratios)}


def controller_side(nodes: int) -> dict:
    """Plan, fingerprints and assessment for a converged fleet of `nodes`, no SSH."""
    with tempfile.TemporaryDirectory(prefix="kiln-reapply-") as tmp:
        write_example(Path(tmp), nodes)
        start = time.monotonic()
        cluster = require_valid(Path(tmp) / "hosts.yml")
        loaded = time.monotonic()
        plan = make_plan(cluster, PlanOptions(), Path(tmp) / "state")
        planned = time.monotonic()
        desired = fingerprints(plan)
        printed = time.monotonic()
        probes = {}
        for stage, hosts in desired.items():
            for host, fingerprint in hosts.items():
                probes.setdefault(host, {})[stage] = {"fingerprint": fingerprint, "drift": []}
        answers = {h: NodeProbe(h, True, stages) for h, stages in probes.items()}
        assessed_at = time.monotonic()
        assessment = assess(desired, answers, [s.name for s in plan.stages])
        done = time.monotonic()
    assert not assessment.to_run(), "a converged fleet's assessment runs something"
    return {
        "validate_s": loaded - start,
        "plan_s": planned - loaded,
        "fingerprints_s": printed - planned,
        "assess_s": done - assessed_at,
        "total_s": (printed - start) + (done - assessed_at),
    }


def probe_cost(hosts: int, keep: bool) -> dict:
    """Wall and this process's CPU for one probe of `hosts` light hosts (best of 3)."""
    up = light.up(hosts, config.paths())
    try:
        cluster = require_valid(up.inventory)
        targets = list(cluster.nodes)
        best = None
        for _ in range(3):
            cpu, start = time.process_time(), time.monotonic()
            probes = probe_nodes(targets)
            wall, used = time.monotonic() - start, time.process_time() - cpu
            failed = [p.error for p in probes.values() if not p.ok]
            assert not failed and len(probes) == hosts, failed[:3]
            node_s = statistics.median(p.seconds for p in probes.values())
            if best is None or used < best["cpu_s"]:
                best = {"wall_s": wall, "cpu_s": used, "session_s": node_s}
        # A session alone (one in flight): what a node on its own CPU answers in; above, 100
        # hosts share this machine's cores with the controller, which stretches each session.
        alone = [
            probe_nodes([node], fanout=1)[node.name].seconds for node in targets[:FANOUT_ALONE]
        ]
        return {"hosts": hosts, **best, "alone_s": statistics.median(alone)}
    finally:
        if not keep:
            light.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="the sandbox's inventory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fleet", type=int, default=FLEET)
    parser.add_argument("--probe-hosts", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="leave the light hosts running")
    parser.add_argument("--projection-only", action="store_true", help="skip the sandbox pairs")
    args = parser.parse_args()

    if args.projection_only:  # the scale figures alone, without the sandbox's pairs
        pairs = {"drift_s": [0.0], "full_s": [0.0], "ratio": 0.0}
    else:
        pairs = sandbox_pairs(args.inventory, args.repeats)
    side = controller_side(args.fleet)
    probe = probe_cost(args.probe_hosts, args.keep)

    ok_time = ok_ratio = True
    if not args.projection_only:
        drift, full = pairs["drift_s"], pairs["full_s"]
        print(f"\nconverged re-apply of the sandbox ({args.inventory}), {args.repeats} pairs:")
        print(f"  drift-aware  min {min(drift):.1f} s  median {statistics.median(drift):.1f} s")
        print(f"  --full       min {min(full):.1f} s  median {statistics.median(full):.1f} s")
        ok_time, ok_ratio = statistics.median(drift) < 15, pairs["ratio"] >= 5
        print(f"  --full / drift-aware, median of pairs: {pairs['ratio']:.1f}x")
        print(f"  goals: under 15 s {'met' if ok_time else 'NOT met'}; at least 5x faster than "
              f"--full {'met' if ok_ratio else 'NOT met'}")  # fmt: skip
    print(f"\ncontroller side at {args.fleet:,} nodes (no SSH): validate "
          f"{side['validate_s']:.2f} s, plan {side['plan_s']:.2f} s, fingerprints "
          f"{side['fingerprints_s']:.2f} s, assess {side['assess_s']:.2f} s")  # fmt: skip
    per_cpu = probe["cpu_s"] / probe["hosts"]
    print(f"probe over SSH at {probe['hosts']} light hosts: {probe['wall_s']:.1f} s wall, "
          f"{per_cpu * 1e3:.1f} ms of kiln's CPU per node, a node's session "
          f"{probe['session_s']:.2f} s (median)")  # fmt: skip
    # The probe runs in kiln's one process (threads: one core at most, the GIL) with FANOUT
    # sessions in flight; the nodes' own time overlaps. Nothing else runs on a converged fleet.
    print(f"  a session alone (one in flight, median of {FANOUT_ALONE}): "
          f"{probe['alone_s']:.2f} s")  # fmt: skip
    cpu_bound = args.fleet * per_cpu
    for label, session in (("nodes on their own CPUs", probe["alone_s"]),
                           ("sessions as stretched here", probe["session_s"])):  # fmt: skip
        waves = math.ceil(args.fleet / FANOUT) * session
        projected = side["total_s"] + max(waves, cpu_bound)
        print(
            f"projection, {args.fleet:,} converged nodes on a {CORES}-core controller, {label}: "
            f"{projected / 60:.1f} min = controller side {side['total_s']:.0f} s + probe "
            f"max({math.ceil(args.fleet / FANOUT)} waves x {session:.2f} s, "
            f"{args.fleet:,} x {per_cpu * 1e3:.1f} ms on one core) = {max(waves, cpu_bound):.0f} s"
        )
    return 0 if ok_time and ok_ratio else 1


if __name__ == "__main__":
    raise SystemExit(main())
