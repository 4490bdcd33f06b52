"""GEMM rules: per GPU against the floor, its node's best GPU, checksums and throttling;
per node against the fleet median of its profile (see kiln.judging.analysis for the list).

`checksum` is silent data corruption, three ways: a product that disagrees with the FP64
reference (`checksum_ok`), a product that changed between repeats on one GPU (`bit_mismatches`),
and a GPU whose product differs bitwise from its node's other GPUs (`digest`: every GPU of a
node multiplies the same seeded matrices; the GPUs outside the majority are named)."""

from __future__ import annotations

from collections import Counter
from functools import cache

from kiln.inventory.model import Node
from kiln.judging._rules import DRAIN, C, W
from kiln.judging.model import BurninReport
from kiln.judging.pairs import median
from kiln.judging.results import GemmDevice, GemmResult
from kiln.judging.table import GemmRow
from kiln.judging.thresholds import Floors
from kiln.judging.verdicts import Verdict, num
from kiln.judging.verdicts import node_verdict as _node

HARDWARE_THROTTLE = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
FAILING_THROTTLE = HARDWARE_THROTTLE | {"sw_thermal_slowdown"}


def digest_outliers(devices: tuple[GemmDevice, ...]) -> dict[int, str]:
    """GPU index -> why its product is not the node's: bitwise unlike the majority of the GPUs
    that report a digest, or unlike every other when there is no majority (all of them named)."""
    digests = {d.index: d.digest for d in devices if d.digest and not d.error}
    if len(digests) < 2:
        return {}
    (common, count), *_ = Counter(digests.values()).most_common()
    total = len(digests)
    if count * 2 > total:
        return {
            index: f"product differs bitwise from the {count}/{total} GPUs that agree"
            for index, value in digests.items()
            if value != common
        }
    return {i: f"products differ bitwise across {total} GPUs, no majority" for i in digests}


def _sdc_text(dev: str, d: GemmDevice, odd: str | None) -> str:
    if d.error:
        return f"gemm {dev} failed: {d.error}"
    if odd:
        return f"gemm {dev} {odd} (silent data corruption)"
    if d.bit_mismatches:
        return (
            f"gemm {dev} product changed in {d.bit_mismatches}/{d.bit_checks} repeats "
            "(silent data corruption)"
        )
    return f"gemm {dev} wrong results (silent data corruption)"


def judge_gemm(report: BurninReport, node: Node, row: GemmRow, f: Floors, table) -> float | None:
    """The GEMM rules for one node with a result; returns its mean TFLOPS (None without
    devices). A clean row whose every figure passes is judged from its columns; anything else
    from the result's record (`table.gemm_record`), device by device."""
    passing = _passing_figures(row, f)
    if passing is None:
        return _judge_devices(report, node, table.gemm_record(node.name), f)
    tflops, worst, relative = passing
    report.gpu_tflops[node.name] = tflops
    _gpu_count(report, node, len(tflops))
    _node_checks(report, node.name, worst, f.gemm_tflops, relative, _NOTHING_BAD, False)
    return sum(tflops) / len(tflops)


_NOTHING_BAD: dict[str, list[str]] = {
    "checksum": [], "gemm_floor": [], "gemm_vs_node_best": [], "throttle": []
}  # fmt: skip


@cache
def _throttle_passes(union: str) -> bool:
    """No reason of a row's throttle union (comma-joined; a few distinct ones a fleet) fails."""
    return FAILING_THROTTLE.isdisjoint(union.split(",")) if union else True


def _passing_figures(row: GemmRow, f: Floors) -> tuple[list[float], float, float | None] | None:
    """(TFLOPS per device, the worst, the node-best threshold) when the row is clean, no
    throttle reason fails and every figure is at or above both floors; None when the devices
    must be read."""
    if row.clean != "1" or not row.tflops:
        return None
    if not _throttle_passes(row.throttle):
        return None
    tflops = list(map(float, row.tflops.split(",")))  # finite: `clean` says so
    worst = min(tflops)
    relative = max(tflops) * (1 - f.gemm_relative_pct / 100) if len(tflops) > 1 else None
    if worst < f.gemm_tflops or (relative is not None and worst < relative):
        return None
    return tflops, worst, relative


def _gpu_count(report: BurninReport, node: Node, count: int) -> None:
    expected = node.gpu_count if node.has_gpus else 1
    text = f"gemm ran on {count} of {expected} {'GPUs' if node.has_gpus else 'devices'}"
    report.verdicts.append(
        _node(node.name, "gpu_count", count >= expected, C, DRAIN, text, count, expected)
    )


def _node_checks(report, name: str, worst: float, floor: float, relative: float | None,
                 bad: dict[str, list[str]], hardware: bool) -> None:  # fmt: skip
    """The node's verdict per GEMM check, each failing one naming its first failing GPU."""
    figures = {"gemm_floor": (worst, floor), "gemm_vs_node_best": (worst, relative)}
    add = report.verdicts.append
    for check, texts in bad.items():
        if check == "gemm_vs_node_best" and relative is None:
            continue
        severity = C if check == "checksum" or (check == "throttle" and hardware) else W
        message = (
            texts[0] + (f" (+{len(texts) - 1} more)" if len(texts) > 1 else "") if texts else ""
        )
        measured, threshold = figures.get(check, (None, None))
        unit = "TFLOPS" if check in figures else ""
        add(_node(name, check, not texts, severity, DRAIN, message, measured, threshold, unit))


def _judge_devices(report: BurninReport, node: Node, result: GemmResult, f: Floors) -> float | None:
    """Per-GPU rules over the record; returns the node's mean TFLOPS (None without devices)."""
    name, devices, add = node.name, result.devices, report.verdicts.append
    report.gpu_tflops[name] = [d.tflops for d in devices]
    _gpu_count(report, node, len(devices))
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
    outliers = digest_outliers(devices)
    for d in devices:
        odd = outliers.get(d.index)
        if (
            d.checksum_ok
            and not d.bit_mismatches
            and odd is None
            and d.tflops >= floor
            and (relative is None or d.tflops >= relative)
            and (not d.throttle_reasons or FAILING_THROTTLE.isdisjoint(d.throttle_reasons))
        ):
            continue  # the common case: a healthy GPU costs four comparisons
        dev = f"{label}{d.index}"
        gpu = f"{name}/{dev}"
        if not d.checksum_ok or d.bit_mismatches or odd:
            text = _sdc_text(dev, d, odd)
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
    _node_checks(report, name, worst, floor, relative, bad, hardware)
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
