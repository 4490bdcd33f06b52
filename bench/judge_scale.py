"""Benchmark: judging a 100,000-GPU burn-in (12,500 nodes x 8 GPUs) beside json-loading it.

Synthetic results, in memory: per node one gemm document and one in-node all-reduce document,
plus the pairwise pass of the whole fleet (pair_schedule: 14 rounds, 87,500 node pairs).
Baseline, measured in the same run: `json.loads` of the same documents (the least any judge
must do). Printed: the baseline, parsing the documents into result records, judging them
(analysis.judge, localisation included), and the ratio of parse+judge to the baseline.
Goal (issue 8): judging 100,000 GPUs in under 1 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from kiln.examples import write_example
from kiln.inventory import require_valid
from kiln.judging.analysis import judge
from kiln.judging.pairs import pair_schedule
from kiln.judging.results import allreduce_from_doc, gemm_from_doc


def gemm_doc(rng: random.Random, host: str, gpus: int) -> str:
    devices = [
        {
            "index": i,
            "dtype": "bfloat16",
            "name": "NVIDIA H100 80GB HBM3",
            "tflops": round(rng.gauss(745, 8), 1),
            "iterations": 40000,
            "seconds": 60.0,
            "checksum_ok": rng.random() > 1e-4,
            "check_error_ratio": 0.2,
            "clocks": {
                "samples": 60,
                "sm_mhz_min": 1755.0,
                "sm_mhz_mean": 1830.0,
                "sm_mhz_max_rated": 1980.0,
                "temp_c_max": 71.0,
                "power_w_max": 699.0,
                "throttle_reasons": ["sw_power_cap"],
            },
        }
        for i in range(gpus)
    ]
    return json.dumps(
        {
            "schema_version": 1,
            "kind": "gemm",
            "hostname": host,
            "device_kind": "cuda",
            "n": 8192,
            "devices": devices,
            "samples": [],
        }
    )


def allreduce_doc(hosts: list[str], busbw: float) -> str:
    rows = [
        {
            "bytes": 1 << s,
            "count": 1 << (s - 2),
            "time_us": 1.0,
            "algbw_gbs": busbw / 1.75,
            "busbw_gbs": busbw * (1 << s) / ((1 << s) + (4 << 20)),
        }
        for s in range(20, 31)
    ]
    return json.dumps(
        {
            "schema_version": 1,
            "kind": "allreduce",
            "hosts": hosts,
            "world_size": 8 * len(hosts),
            "rows": rows,
            "verdict_bytes": 1 << 30,
            "verdict_busbw_gbs": rows[-1]["busbw_gbs"],
            "correct": True,
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=12500)
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        write_example(Path(tmp), args.nodes)
        cluster = require_valid(tmp)
    nodes = [n.name for n in cluster.compute]
    gemm_docs = {name: gemm_doc(rng, name, 8) for name in nodes}
    jobs = {f"node-{name}": allreduce_doc([name], rng.gauss(460, 5)) for name in nodes}
    for r, rnd in enumerate(pair_schedule(nodes)):
        for a, b in rnd:
            jobs[f"pair-r{r}-{a}--{b}"] = allreduce_doc([a, b], rng.gauss(392, 3))
    best = {"load": 1e9, "parse": 1e9, "judge": 1e9}
    cpu = dict(best)
    for _ in range(args.repeat):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        loaded_g = {k: json.loads(v) for k, v in gemm_docs.items()}
        loaded_a = {k: json.loads(v) for k, v in jobs.items()}
        t1, c1 = time.perf_counter(), time.process_time()
        gemm = {k: gemm_from_doc(k, d) for k, d in loaded_g.items()}
        allreduce = [allreduce_from_doc(k, d) for k, d in loaded_a.items()]
        t2, c2 = time.perf_counter(), time.process_time()
        report = judge(cluster, gemm, allreduce)
        t3, c3 = time.perf_counter(), time.process_time()
        for key, wall, used in (
            ("load", t1 - t0, c1 - c0),
            ("parse", t2 - t1, c2 - c1),
            ("judge", t3 - t2, c3 - c2),
        ):
            best[key] = min(best[key], wall)
            cpu[key] = min(cpu[key], used)
    gpus = sum(len(t) for t in report.gpu_tflops.values())
    work = best["parse"] + best["judge"]
    print(
        f"nodes {len(nodes)}  GPUs {gpus}  allreduce jobs {len(jobs)}  "
        f"verdicts {len(report.verdicts)}  failed {len(report.failures)}"
    )
    print("                                            wall s   CPU s (this process)")
    for key, label in (
        ("load", "baseline json.loads of the same documents"),
        ("parse", "parse into result records"),
        ("judge", "judge (analysis + pairwise localisation)"),
    ):
        print(f"{label:<43} {best[key]:>6.3f}   {cpu[key]:>6.3f}")
    print(
        f"parse + judge: {work:.3f} s wall = {work / best['load']:.2f}x the json.loads "
        f"baseline; judge alone {best['judge'] / best['load']:.2f}x"
    )
    return 0 if best["judge"] < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
