"""Benchmark: kiln validate/plan on generated inventories beside `ansible-inventory --list`.

Baseline: ansible-inventory --list on the same files, measured in the same run. Prints wall
time, peak RSS and the ratio, and the cost per node at each size so a non-linear term shows.
Goal (issue 2): 12,500 nodes validate and plan in under 3 s and 1 GiB on 2 cores.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.examples import write_example

BIN = Path(sys.executable).parent


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1250,5000,12500")
    parser.add_argument(
        "--skip-ansible",
        action="store_true",
        help="skip the ansible-inventory baseline (slow: ~20 s at 12,500)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    print(
        f"{'nodes':>7} {'GPUs':>7} {'validate s':>10} {'plan s':>8} {'plan MiB':>9} "
        f"{'us/node':>8} {'ansible-inventory s':>20} {'kiln/ansible':>12}"
    )
    try:
        for nodes in sizes:
            inventory = work / f"inv{nodes}"
            write_example(inventory, nodes)
            validate_s, _ = timed([str(BIN / "kiln"), "validate", str(inventory)])
            plan_s, plan_mib = timed(
                [str(BIN / "kiln"), "plan", str(inventory), "--output", str(work / f"out{nodes}")]
            )
            ansible = "-"
            ratio = "-"
            if not args.skip_ansible:
                ansible_s, _ = timed(
                    [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"]
                )
                ansible, ratio = f"{ansible_s:.2f}", f"{validate_s / ansible_s:.3f}"
            print(
                f"{nodes:>7} {nodes * 8:>7} {validate_s:>10.2f} {plan_s:>8.2f} "
                f"{plan_mib:>9.0f} {plan_s / nodes * 1e6:>8.0f} {ansible:>20} {ratio:>12}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
