"""`kiln health` over the sandbox against `kiln exec` of a trivial command (issue 19).

Both go through the same SSH fan-out to the same compute nodes; the difference is the health
check itself (every probe the node's expectations ask for) and reading its answer. Paired runs,
alternating which goes first, so load on the machine hits both alike. The baseline is
`kiln exec INVENTORY true`.

    python bench/health_remote.py inventories/sandbox [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

KILN = str(Path(sys.executable).parent / "kiln")


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a node is unhealthy, still a measured answer
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    inventory = str(args.inventory)
    health = [KILN, "health", inventory, "--json"]
    trivial = [KILN, "exec", inventory, "--nodes", "kiln_compute", "--json", "true"]
    timed(health)  # warm: SSH connections, page cache
    pairs = []
    for round_ in range(args.repeat):
        order = (health, trivial) if round_ % 2 == 0 else (trivial, health)
        first, second = timed(order[0]), timed(order[1])
        pairs.append((first, second) if order[0] is health else (second, first))
    health_s = statistics.median(h for h, _ in pairs)
    exec_s = statistics.median(e for _, e in pairs)
    ratio = statistics.median(h / e for h, e in pairs)
    print(f"{'wall s, median of ' + str(args.repeat) + ' paired runs':<44} {'s':>7}")
    print(f"{'baseline: kiln exec true (compute nodes)':<44} {exec_s:>7.3f}")
    print(f"{'kiln health (every probe, compute nodes)':<44} {health_s:>7.3f}")
    print(f"kiln health = {ratio:.2f}x kiln exec of a trivial command (median of paired ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
