"""GEMM rules: per GPU against the floor, its node's best GPU, checksums and throttling;
per node against the fleet median of its profile (see kiln.judging.analysis for the list)."""

from __future__ import annotations

from kiln.inventory.model import Node
from kiln.judging._rules import DRAIN, C, W
from kiln.judging._rules import node_verdict as _node
from kiln.judging.model import BurninReport
from kiln.judging.pairs import median
from kiln.judging.results import GemmResult
from kiln.judging.thresholds import Floors
from kiln.judging.verdicts import Verdict, num

HARDWARE_THROTTLE = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
FAILING_THROTTLE = HARDWARE_THROTTLE | {"sw_thermal_slowdown"}


def judge_gemm(report: BurninReport, node: Node, result: GemmResult, f: Floors) -> float | None:
    """Per-GPU rules; returns the node's mean TFLOPS (None without devices)."""
    name, devices, add = node.name, result.devices, report.verdicts.append
    report.gpu_tflops[name] = [d.tflops for d in devices]
    expected = node.gpu_count if node.has_gpus else 1
    count_ok = len(devices) >= expected
    add(
        _node(
            name,
            "gpu_count",
            count_ok,
            C,
            DRAIN,
            f"gemm ran on {len(devices)} of {expected} {'GPUs' if node.has_gpus else 'devices'}",
            len(devices),
            expected,
        )
    )
    if not devices:
        return None
    label = "gpu" if result.device_kind == "cuda" else "cpu"
    best = max(d.tflops for d in devices)
    relative = best * (1 - f.gemm_relative_pct / 100) if len(devices) > 1 else None
    floor = f.gemm_tflops
    bad: dict[str, list[str]] = {
        "checksum": [],
        "gemm_floor": [],
        "gemm_vs_node_best": [],
        "throttle": [],
    }
    hardware = False
    for d in devices:
        if (
            d.checksum_ok
            and d.tflops >= floor
            and (relative is None or d.tflops >= relative)
            and (not d.throttle_reasons or FAILING_THROTTLE.isdisjoint(d.throttle_reasons))
        ):
            continue  # the common case: a healthy GPU costs four comparisons
        dev = f"{label}{d.index}"
        gpu = f"{name}/{dev}"
        if not d.checksum_ok:
            text = (
                f"gemm {dev} failed: {d.error}"
                if d.error
                else f"gemm {dev} wrong results (silent data corruption)"
            )
            add(
                Verdict(
                    "gpu", gpu, "checksum", False, severity=C, action=DRAIN, message=text, node=name
                )
            )
            bad["checksum"].append(text)
        if d.tflops < floor:
            text = f"gemm {dev} {num(d.tflops)} TFLOPS < floor {num(floor)}"
            add(
                Verdict(
                    "gpu", gpu, "gemm_floor", False, d.tflops, floor, "TFLOPS", W, DRAIN, text, name
                )
            )
            bad["gemm_floor"].append(text)
        if relative is not None and d.tflops < relative:
            text = (
                f"gemm {dev} {num(d.tflops)} TFLOPS < {100 - f.gemm_relative_pct:g}% of "
                f"node best {num(best)}"
            )
            add(
                Verdict(
                    "gpu",
                    gpu,
                    "gemm_vs_node_best",
                    False,
                    d.tflops,
                    relative,
                    "TFLOPS",
                    W,
                    DRAIN,
                    text,
                    name,
                )
            )
            bad["gemm_vs_node_best"].append(text)
        failing = [r for r in d.throttle_reasons if r in FAILING_THROTTLE]
        if failing:
            hw = any(r in HARDWARE_THROTTLE for r in failing)
            hardware = hardware or hw
            text = f"{dev} throttled: {', '.join(failing)}"
            add(
                Verdict(
                    "gpu",
                    gpu,
                    "throttle",
                    False,
                    severity=C if hw else W,
                    action=DRAIN,
                    message=text,
                    node=name,
                )
            )
            bad["throttle"].append(text)
    worst = min(d.tflops for d in devices)
    figures = {"gemm_floor": (worst, floor), "gemm_vs_node_best": (worst, relative)}
    for check, texts in bad.items():
        if check == "gemm_vs_node_best" and relative is None:
            continue
        severity = C if check == "checksum" or (check == "throttle" and hardware) else W
        message = (
            texts[0] + (f" (+{len(texts) - 1} more)" if len(texts) > 1 else "") if texts else ""
        )
        measured, threshold = figures.get(check, (None, None))
        unit = "TFLOPS" if check in figures else ""
        add(
            _node(
                name,
                check,
                not texts,
                severity,
                DRAIN,
                message if texts else "",
                measured,
                threshold,
                unit,
            )
        )
    return sum(d.tflops for d in devices) / len(devices)


def judge_fleet(report: BurninReport, rows: list[tuple[str, float]], f: Floors) -> None:
    if len(rows) < 2:
        return  # one node has no fleet to be compared with
    mid = median([mean for _, mean in rows])
    limit = mid * (1 - f.node_relative_pct / 100)
    keep = 100 - f.node_relative_pct
    for name, mean in rows:
        ok = mean >= limit
        text = (
            ""
            if ok
            else (f"gemm node mean {num(mean)} TFLOPS < {keep:g}% of fleet median {num(mid)}")
        )
        report.verdicts.append(
            _node(name, "node_vs_fleet", ok, W, DRAIN, text, mean, limit, "TFLOPS")
        )
