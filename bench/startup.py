"""Benchmark: how fast kiln starts. `kiln --help` and `kiln validate` on a generated inventory,
against `python -c pass` (the interpreter's own start) in the same run.

Each round runs every case once, in turn (paired: a busy moment hits all of them), for --repeat
rounds; min and median per case, and each as a ratio to the baseline. `--before SRC` times a
second kiln source tree too (say, `git archive HEAD cli | tar -x -C /tmp/before`, then
`--before /tmp/before/cli`), paired with this one, and prints after/before. Both sides start the
same way (`python -c "from kiln.app import main; main()"`) and must exit 0 with the same output.
Goal (issue 21): `kiln --help` and `kiln validate` import no SSH, burn-in or Ansible code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.examples import write_example

SRC = Path(__file__).resolve().parents[1] / "cli"
LAUNCH = "from kiln.app import main; main()"


def run(argv: list[str], src: Path | None) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(src)} if src else None
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{argv[2:]} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=12500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another kiln source tree (its cli/)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-start-"))
    try:
        inventory = work / "inv"
        write_example(inventory, args.nodes)
        kiln = [sys.executable, "-c", LAUNCH]
        cases = {"python -c pass": ([sys.executable, "-c", "pass"], None)}
        sides = [("", SRC)] + ([(" (before)", args.before.resolve())] if args.before else [])
        for label, src in sides:
            cases[f"kiln --help{label}"] = ([*kiln, "--help"], src)
            cases[f"kiln validate {args.nodes}{label}"] = ([*kiln, "validate", str(inventory)], src)
        times: dict[str, list[float]] = {name: [] for name in cases}
        outputs: dict[str, str] = {}
        for _ in range(args.repeat):
            for name, (argv, src) in cases.items():
                wall, out = run(argv, src)
                times[name].append(wall)
                outputs[name] = out
        if args.before:  # the same answers, or the comparison means nothing
            for name in cases:
                if name.endswith(" (before)") and name.startswith("kiln validate"):
                    after = outputs[name.removesuffix(" (before)")]
                    assert after == outputs[name], f"{name}: the two sides answered differently"
        base = min(times["python -c pass"])
        print(f"{'case':<34} {'min s':>7} {'median s':>9} {'min/python':>11}")
        for name, walls in times.items():
            low, mid = min(walls), statistics.median(walls)
            print(f"{name:<34} {low:>7.3f} {mid:>9.3f} {low / base:>10.1f}x")
        if args.before:
            for name in cases:
                if name.endswith(" (before)"):
                    after = name.removesuffix(" (before)")
                    ratio = min(times[after]) / min(times[name])
                    print(f"after/before {after}: {ratio:.2f} (min over {args.repeat} rounds)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
