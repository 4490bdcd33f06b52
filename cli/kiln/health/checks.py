"""The health probes' judgement: a tool's text and the node's expectations in, findings out.

    findings = gpu_findings(query_csv, expect)          # gpu_count, gpu_model, persistence, ...
    findings = xid_findings(journal_text, expect)       # xid: a drain Xid since the last check

Each function is pure (no I/O, never raises on a fault it is there to find) and returns
Findings named by check id (ok True: passes; False: fails; None: the probe could not check);
the node program (kiln.health.node) runs the tools. The check ids are what a drain reason
names: `kiln:health:<check id>: <reading>`.

Everything here runs on the node with the node's python3 (3.10 or newer), stdlib and
kiln.parsers only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.parsers import ParseError
from kiln.parsers.ibstat import parse_ibstat
from kiln.parsers.nvidia_smi_nvlink import parse_nvlink_status
from kiln.parsers.nvidia_smi_query import parse_query_gpu_csv
from kiln.parsers.nvrm_xid import parse_xid_lines
from kiln.parsers.perfquery import SYSFS_NAMES, parse_perfquery

# What the gpu probe asks nvidia-smi (driver branch 535 and newer name every one of them).
GPU_QUERY = (
    "index",
    "name",
    "pci.bus_id",
    "persistence_mode",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
)
_HW_THROTTLE = {
    "clocks_event_reasons.hw_slowdown": "hw slowdown",
    "clocks_event_reasons.hw_thermal_slowdown": "hw thermal slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown": "hw power brake",
}
# perfquery's error counters (its data, packet and wait counters are traffic, not errors).
IB_ERROR_COUNTERS = tuple(
    name for name in SYSFS_NAMES if "Data" not in name and "Pkts" not in name and "Wait" not in name
)

# What one `nvidia-smi --query-gpu` reading answers (the node program's gpu probe).
GPU_QUERY_CHECKS = (
    "gpu_count",
    "gpu_model",
    "persistence",
    "ecc",
    "retired_pages",
    "remapped_rows",
    "throttle",
)
GPU_CHECKS = (*GPU_QUERY_CHECKS, "nvlink", "fabric_manager", "xid")
AMD_GPU_CHECKS = ("gpu_count", "gpu_model")
AMD_VENDOR = "0x1002"  # PCI vendor id of AMD's GPUs
FABRIC_CHECKS = ("ib_port", "ib_errors")
NODE_CHECKS = ("mount", "time_sync", "slurmd", "munge", "disk")
CHECKS = GPU_CHECKS + FABRIC_CHECKS + NODE_CHECKS
# Checks that judge EVENTS in a window since the last check (new kernel Xid lines, the rise of
# the IB error counters), not a state a later reading shows again: the next check reads a quiet
# window whatever the GPU or link is like (a drained node runs no traffic), so a later pass does
# not disprove their failure. kiln.health.decide never auto-resumes their drains.
EVENT_CHECKS = ("xid", "ib_errors")


@dataclass(frozen=True)
class Finding:
    check: str  # one of CHECKS
    ok: bool | None  # None: the probe could not check (not a failure; it never drains)
    reading: str  # what was read, one line: "7 GPUs, expected 8"

    @property
    def failed(self) -> bool:
        return self.ok is False

    @property
    def unchecked(self) -> bool:
        return self.ok is None

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "reading": self.reading}


def _fail(check: str, reading: str) -> Finding:
    return Finding(check, False, reading)


def _ok(check: str, reading: str) -> Finding:
    return Finding(check, True, reading)


def _gpu_list(indexes: list[str]) -> str:
    return "gpu" + ",".join(indexes)


def gpu_findings(text: str, expect: dict) -> list[Finding]:
    """`nvidia-smi --query-gpu=<GPU_QUERY> --format=csv` against expect["gpu"]: the count and
    model, persistence mode, uncorrectable ECC, retired pages, remapped rows and hardware
    throttling, each judged against expect["thresholds"]."""
    gpu, limits = expect["gpu"], expect["thresholds"]
    try:
        rows = parse_query_gpu_csv(text)
    except ParseError as error:
        return [_fail("gpu_count", f"nvidia-smi output unreadable: {error}")]
    found: list[Finding] = []
    count = len(rows)
    found.append(
        _ok("gpu_count", f"{count} GPUs")
        if count == gpu["count"]
        else _fail("gpu_count", f"{count} GPUs, expected {gpu['count']}")
    )
    names = {" ".join(n.split()).casefold() for n in gpu.get("product_names", [])}
    wrong = [
        f"gpu{r.values.get('index')} {r.values.get('name')}"
        for r in rows
        if names and " ".join((r.values.get("name") or "").split()).casefold() not in names
    ]
    found.append(
        _fail("gpu_model", f"{', '.join(wrong)} is not {gpu['model']}")
        if wrong
        else _ok("gpu_model", gpu["model"])
    )

    def per_gpu(check: str, bad, what: str) -> Finding:
        hits = [(r.values.get("index") or "?", r) for r in rows if bad(r)]
        if not hits:
            return _ok(check, f"no GPU with {what}")
        return _fail(check, f"{_gpu_list([i for i, _ in hits])}: {what}")

    def over(field: str, limit: int):
        return lambda r: field in r and (r.get_int(field) or 0) > limit

    def yes(field: str):
        return lambda r: field in r and bool(r.get_flag(field))

    if gpu.get("persistence_mode", True):
        found.append(
            per_gpu(
                "persistence",
                lambda r: "persistence_mode" in r and r.get_flag("persistence_mode") is False,
                "persistence mode off",
            )
        )
    ecc_max = limits["ecc_uncorrectable_max"]
    found.append(
        per_gpu(
            "ecc",
            over("ecc.errors.uncorrected.volatile.total", ecc_max),
            f"uncorrectable ECC errors > {ecc_max}",
        )
    )
    pages = limits["retired_pages_max"]
    found.append(
        per_gpu(
            "retired_pages",
            lambda r: (
                over("retired_pages.double_bit.count", pages)(r) or yes("retired_pages.pending")(r)
            ),
            f"retired pages > {pages} or a retirement pending",
        )
    )
    rows_max = limits["remapped_rows_max"]
    found.append(
        per_gpu(
            "remapped_rows",
            lambda r: (
                over("remapped_rows.uncorrectable", rows_max)(r)
                or yes("remapped_rows.pending")(r)
                or yes("remapped_rows.failure")(r)
            ),
            f"remapped rows > {rows_max}, a remap pending or failed",
        )
    )
    throttled = [
        f"gpu{r.values.get('index')} {label}"
        for r in rows
        for field, label in _HW_THROTTLE.items()
        if field in r and r.get_flag(field)
    ]
    found.append(
        _fail("throttle", ", ".join(throttled))
        if throttled
        else _ok("throttle", "no hardware throttling")
    )
    return found


def nvlink_findings(text: str, expect: dict) -> list[Finding]:
    """`nvidia-smi nvlink --status`: every expected GPU listed, each with all its links up."""
    try:
        links = parse_nvlink_status(text)
    except ParseError as error:
        return [_fail("nvlink", f"nvidia-smi nvlink output unreadable: {error}")]
    problems = []
    for index in range(expect["gpu"]["count"]):
        states = links.get(index)
        if states is None:
            problems.append(f"gpu{index} missing")
        elif not states:
            problems.append(f"gpu{index} no NVLink information")
        else:
            down = [str(s.link) for s in states if not s.active]
            if down:
                problems.append(f"gpu{index} link {','.join(down)} inactive")
    if problems:
        return [_fail("nvlink", "; ".join(problems))]
    return [_ok("nvlink", f"{expect['gpu']['count']} GPUs, all links up")]


def amd_gpu_findings(vendors: list[str], expect: dict) -> list[Finding]:
    """The PCI vendor of each render node amdgpu made (/sys/class/drm/renderD*/device/vendor)
    against expect["gpu"]["count"]: an AMD GPU that fell off the bus or failed to initialise has
    no render node. The other GPU checks have no AMD reading yet: one unchecked finding says so."""
    count, wanted = sum(v.strip() == AMD_VENDOR for v in vendors), expect["gpu"]["count"]
    found = (
        _ok("gpu_count", f"{count} AMD GPUs (amdgpu render nodes)")
        if count == wanted
        else _fail("gpu_count", f"{count} AMD GPUs (amdgpu render nodes), expected {wanted}")
    )
    return [found, Finding("gpu_model", None, "AMD GPU model, ECC and throttling: not read yet")]


def service_findings(check: str, text: str, unit: str) -> list[Finding]:
    """`systemctl is-active UNIT` printed `text`: active, or the state it is in."""
    state = text.strip().splitlines()[-1].strip() if text.strip() else "no answer"
    if state == "active":
        return [_ok(check, f"{unit} active")]
    return [_fail(check, f"{unit} {state}")]


def xid_findings(text: str, expect: dict) -> list[Finding]:
    """Kernel log lines since the last check: a fail for each GPU with an Xid in expect["xids"]."""
    drain = set(expect["xids"])
    events = [e for e in parse_xid_lines(text) if e.xid in drain]
    if not events:
        return [_ok("xid", "no drain Xid since the last check")]
    seen: dict[tuple[str, int], str] = {}
    for event in events:
        seen.setdefault((event.pci, event.xid), event.text)
    first = next(iter(seen.items()))
    (pci, xid), words = first
    more = f" (+{len(seen) - 1} more)" if len(seen) > 1 else ""
    return [_fail("xid", f"Xid {xid} on PCI {pci}: {words}{more}")]


def _port_text(port) -> str:
    if port is None:
        return "has no port"
    rate = f", {port.rate_gbps:g} Gb/s" if port.rate_gbps else ""
    return f"port {port.number} {port.state}/{port.physical_state}{rate}"


def ib_port_findings(text: str, expect: dict) -> list[Finding]:
    """`ibstat`: each declared HCA (by name or node GUID) has a port Active at the rate."""
    fabric = expect["fabric"]
    try:
        cas = parse_ibstat(text)
    except ParseError as error:
        return [_fail("ib_port", f"ibstat output unreadable: {error}")]
    by_key = {ca.name: ca for ca in cas}
    by_key.update({ca.node_guid: ca for ca in cas if ca.node_guid})
    rate = fabric.get("rate_gbps")
    problems = []
    for hca in fabric["hcas"]:
        ca = by_key.get(hca) or by_key.get(hca.lower().removeprefix("0x"))
        if ca is None:
            problems.append(f"{hca} missing")
            continue
        ports = [p for p in ca.ports if (p.link_layer or "InfiniBand") == "InfiniBand"] or list(
            ca.ports
        )
        good = [
            p for p in ports if p.state == "Active" and (rate is None or (p.rate_gbps or 0) >= rate)
        ]
        if not good:
            problems.append(
                f"{ca.name} {_port_text(ports[0] if ports else None)}"
                + (f" (want Active at {rate} Gb/s)" if rate else " (want Active)")
            )
    if problems:
        return [_fail("ib_port", "; ".join(problems))]
    return [_ok("ib_port", f"{len(fabric['hcas'])} rails Active")]


def ib_counters(text: str) -> dict[str, int]:
    """`perfquery -x` of one port: its error counters by name; {} when it does not read."""
    try:
        blocks = parse_perfquery(text)
    except ParseError:
        return {}
    counters: dict[str, int] = {}
    for block in blocks:
        for name in IB_ERROR_COUNTERS:
            if name in block.counters:
                counters[name] = counters.get(name, 0) + block.counters[name]
    return counters


def ib_error_findings(before: dict, now: dict, expect: dict) -> list[Finding]:
    """Error counters rising faster than expect["thresholds"]["ib_errors_per_minute_max"].

    `before` and `now`: {hca: {"t": epoch seconds, "counters": {...}}}. An HCA first seen, or
    whose counters went down (reset), is a new baseline and passes."""
    limit = expect["thresholds"]["ib_errors_per_minute_max"]
    problems = []
    for hca, current in sorted(now.items()):
        old = before.get(hca)
        if not old or current["t"] <= old["t"]:
            continue
        minutes = (current["t"] - old["t"]) / 60
        for name, value in sorted(current["counters"].items()):
            delta = value - old["counters"].get(name, value)
            if delta > 0 and delta / minutes > limit:
                problems.append(f"{hca} {name} +{delta} in {minutes:.1f} min")
    if problems:
        return [_fail("ib_errors", "; ".join(problems) + f" (> {limit}/min)")]
    return [_ok("ib_errors", f"error counters under {limit}/min")]


def mount_findings(proc_mounts: str, expect: dict) -> list[Finding]:
    """/proc/mounts holds every expected mount point."""
    mounted = {line.split()[1] for line in proc_mounts.splitlines() if len(line.split()) > 2}
    missing = [m for m in expect["node"]["mounts"] if (m.rstrip("/") or "/") not in mounted]
    if missing:
        return [_fail("mount", f"mount {', '.join(missing)} missing")]
    return [_ok("mount", f"{len(expect['node']['mounts'])} mounts present")]


def time_findings(text: str) -> list[Finding]:
    """`timedatectl show -p NTPSynchronized --value`: yes."""
    answer = text.strip() or "no answer"
    if answer == "yes":
        return [_ok("time_sync", "clock synchronised")]
    return [_fail("time_sync", f"clock not synchronised (NTPSynchronized={answer})")]


# systemd-timedated's own rule for NTPSynchronized (src/timedate/timedated.c, ntp_synced()):
# the kernel's maximum error under 16 s; STA_UNSYNC is ignored (it may be set only to keep the
# kernel off the RTC). The kernel sets maxerror to 16 s until a time daemon disciplines it.
MAXERROR_SYNCED_US = 16_000_000
_STA_UNSYNC = 0x0040


def kernel_time_findings(maxerror_us: int, status: int) -> list[Finding]:
    """adjtimex(2)'s reading of the kernel clock (kiln.health.clock), judged as timedatectl's
    NTPSynchronized is: what the probe reads when timedatectl cannot answer (no D-Bus)."""
    flag = ", STA_UNSYNC" if status & _STA_UNSYNC else ""
    error = f"kernel max error {maxerror_us / 1e6:g} s{flag}"
    if maxerror_us < MAXERROR_SYNCED_US:
        return [_ok("time_sync", f"clock synchronised ({error})")]
    return [_fail("time_sync", f"clock not synchronised ({error})")]


def disk_findings(free_mib: dict[str, int | None], expect: dict) -> list[Finding]:
    """Free space of each watched path (None: it does not exist) against its minimum in MiB."""
    problems = []
    for path, minimum in expect["node"]["disks"].items():
        free = free_mib.get(path)
        if free is None:
            problems.append(f"{path} missing")
        elif free < minimum:
            problems.append(f"{path} {free} MiB free < {minimum} MiB")
    if problems:
        return [_fail("disk", "; ".join(problems))]
    return [_ok("disk", "enough free space")]
