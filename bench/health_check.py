"""Benchmark: the node health check's run time (`kiln-health --report`, every probe).

What runs is what a node runs: `python3 -m kiln.health.node --report` from a copy of ONLY the
files the health role ships (kiln.health.expect.NODE_FILES), with the node's python3, against
stand-in tools on PATH that replay recorded real outputs (tests/fixtures/real and the project's
shared ../shared/fixtures/real, see tests/captures.py: nvidia-smi on an H100, NVLink status,
ibstat, perfquery, kernel Xid lines; systemctl and timedatectl answer `active` and `yes`), as
tests/unit/test_health_node.py sets them up. An H100 SXM node with two
InfiniBand rails: every probe kiln has runs (GPU, NVLink, fabric manager, Xid, IB ports and
counters, mounts, time, slurmd, munge, disks).

Baselines, measured in the same run:
  - `python3 -c pass`: the interpreter's start, the least any check in Python costs;
  - the probes' tool calls alone, one after another: the exact argv lines the check ran (recorded
    by the stand-ins on a first run), each started as a process, no Python judging them.
The check runs its probes at once, so it may beat the sequential calls; the difference to the
`python3 -c pass` start is the check's own cost (imports, threads, judging).

Printed: median and p95 of N runs (default 20) for each, the ratios, and whether the goal of
issue 19 (under 1 s with every probe) holds at the p95. Exit 0 when it does, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kiln.health.expect import NODE_FILES, expectations

ROOT = Path(__file__).resolve().parents[1]
KILN = ROOT / "cli" / "kiln"
REAL = ROOT / "tests" / "fixtures" / "real"
# the project's common recordings, beside the checkout (tests/captures.py)
SHARED_REAL = ROOT.parent / "shared" / "fixtures" / "real"
NODE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
GOAL_S = 1.0

# tool -> the recorded output it replays (nvidia-smi picks by its first argument).
OUTPUTS = {
    "nvidia-smi": SHARED_REAL / "nvidia-smi-query-gpu-csv" / "h100_80gb_hbm3_allfields_idle.csv",
    "nvidia-smi nvlink": REAL / "nvidia-smi-nvlink" / "v100_sxm2_7gpu_inactive_links_azhpc.txt",
    "ibstat": SHARED_REAL / "ibstat" / "h100_cx7_some_eth_ports_down.txt",
    "perfquery": REAL / "perfquery" / "edr_hca_o0001_port1_extended.txt",
    "journalctl": REAL / "kernel-xid" / "gpud_dmesg_ctime_xid_13_109_user_app.txt",
}


def stand_ins(bin_dir: Path, log: Path) -> None:
    """Shell stand-ins that append their argv to `log` when KILN_BENCH_RECORD is set."""
    bin_dir.mkdir(parents=True)
    record = f'[ -n "$KILN_BENCH_RECORD" ] && echo "$(basename "$0") $*" >> {log}\n'
    bodies = {
        "nvidia-smi": f'[ "$1" = nvlink ] && exec cat {OUTPUTS["nvidia-smi nvlink"]}\n'
        f"exec cat {OUTPUTS['nvidia-smi']}\n",
        "ibstat": f"exec cat {OUTPUTS['ibstat']}\n",
        "perfquery": f"exec cat {OUTPUTS['perfquery']}\n",
        "journalctl": f"exec cat {OUTPUTS['journalctl']}\n",
        "systemctl": "echo active\n",
        "timedatectl": "echo yes\n",
    }
    for name, body in bodies.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + record + body)
        (bin_dir / name).chmod(0o755)


def node_setup(tmp: Path) -> tuple[list[str], dict[str, str], Path]:
    lib = tmp / "lib"
    for name in NODE_FILES:  # exactly what the health role copies to a node
        (lib / "kiln" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(KILN / name, lib / "kiln" / name)
    log = tmp / "calls.log"
    stand_ins(tmp / "bin", log)
    expect = expectations("gpu001", "h100-sxm", 1, ["mlx5_0", "mlx5_3"], None, {"skip": []})
    expect["node"]["disks"] = {str(tmp): 1}
    (tmp / "health.json").write_text(json.dumps(expect))
    argv = [NODE_PYTHON, "-m", "kiln.health.node", "--report", "--json"]
    argv += ["--expect", str(tmp / "health.json"), "--state-dir", str(tmp / "state")]
    env = {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(lib), "LANG": "C.UTF-8"}
    return argv, env, log


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done.stdout


def sequential(calls: list[list[str]], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    for argv in calls:
        subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - started


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each (default 20)")
    args = parser.parse_args()
    missing = [str(path) for path in OUTPUTS.values() if not path.is_file()]
    if missing:
        sys.exit(f"recorded outputs not found (../shared beside the checkout?): {missing}")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-health-") as name:
        tmp = Path(name)
        argv, env, log = node_setup(tmp)
        # One recorded run: which tools the check calls, and proof that it passes here.
        _, out = timed(argv, {**env, "KILN_BENCH_RECORD": "1"}, tmp)
        document = json.loads(out)
        failing = [f for f in document["findings"] if not f["ok"]]
        if failing:
            print(f"the check does not pass against the stand-ins: {failing}", file=sys.stderr)
            return 2
        calls = [line.split() for line in log.read_text().splitlines()]
        calls = [[str(tmp / "bin" / argv0), *rest] for argv0, *rest in calls]
        results: dict[str, list[float]] = {"python": [], "tools": [], "check": []}
        for _ in range(args.runs):  # interleaved, so drift hits all three alike
            results["python"].append(timed([NODE_PYTHON, "-c", "pass"], env, tmp)[0])
            results["tools"].append(sequential(calls, env, tmp))
            results["check"].append(timed(argv, env, tmp)[0])
    checks = sorted({f["check"] for f in document["findings"]})
    print(f"kiln-health --report on {NODE_PYTHON} ({os.cpu_count()} CPUs), {args.runs} runs")
    print(f"{len(checks)} checks: {' '.join(checks)}")
    shown = "; ".join(" ".join([Path(c[0]).name, *(a[:24] for a in c[1:3])]) for c in calls)
    print(f"{len(calls)} tool calls: {shown}")
    print("                                          median s    p95 s")
    rows = (
        ("python", "baseline: python3 -c pass"),
        ("tools", "baseline: the tool calls in sequence"),
        ("check", "kiln-health --report (every probe)"),
    )
    for key, label in rows:
        print(f"{label:<41} {statistics.median(results[key]):>8.3f} {p95(results[key]):>8.3f}")
    check_median = statistics.median(results["check"])
    print(
        f"check / python3 start: {check_median / statistics.median(results['python']):.2f}x; "
        f"check / sequential tool calls: {check_median / statistics.median(results['tools']):.2f}x"
    )
    met = p95(results["check"]) < GOAL_S
    print(f"goal (issue 19): under {GOAL_S:g} s with every probe: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
