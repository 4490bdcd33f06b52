"""The node health check: `python3 -m kiln.health.node`, what Slurm's HealthCheckProgram runs.

    kiln-health                  # every probe; drain or resume through scontrol (slurmd, root)
    kiln-health --report         # every probe, nothing changed in Slurm (`kiln health`)
    kiln-health --subset prolog  # the Prolog's fast subset: a failure drains, exit 1 stops the job

It reads the expectations kiln wrote from the inventory (/etc/kiln/health.json, made by
kiln.health.expect), runs the probes at once, each under a timeout (a hung nvidia-smi is a failed
check naming the probe), judges the texts with kiln.health.checks, writes the result to
<state dir>/last.json, and applies kiln.health.decide's one rule. A probe that cannot read what
it measures (ProbeUnavailable) says "could not check": not a failure, it drains nothing. Exit 0
healthy (no check failed), 1 not, 2 when the expectations cannot be read. stdlib and
kiln.parsers only: it runs with the node's python3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from kiln.health import checks, clock
from kiln.health.checks import Finding
from kiln.health.decide import Action, decide
from kiln.parsers.drain_reason import node_drain

EXPECT = "/etc/kiln/health.json"
STATE_DIR = "/var/lib/kiln/health"
VERSION = 2  # 2: a finding's ok may be null (the probe could not check)


class ProbeError(Exception):
    """A tool that could not run or failed: the reading of the probe's failed check."""


class ProbeUnavailable(Exception):
    """The probe could not read what it measures, for a reason that says nothing about it (the
    time_sync probe with neither D-Bus nor adjtimex): a "could not check" finding, never a
    failure. Only a probe whose tool's failure is not itself a symptom raises it: a missing or
    hung nvidia-smi on a GPU node IS one, and stays a failed check."""


def run(argv: list[str], timeout: float) -> str:
    """stdout of `argv`; ProbeError when it is missing, times out or exits non-zero."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ProbeError(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{' '.join(argv[:3])} timed out after {timeout:g} s") from None
    if done.returncode != 0 and not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError(f"{argv[0]} exit {done.returncode}: {last}")
    return done.stdout


def free_mib(path: str) -> int | None:
    try:
        stat = os.statvfs(path)
    except FileNotFoundError:
        return None
    return stat.f_bavail * stat.f_frsize // (1024 * 1024)


def _hca_name(hca: str) -> str:
    """An HCA declared by node GUID or PCI address, as its name (mlx5_0) from sysfs."""
    pci = Path("/sys/bus/pci/devices") / hca / "infiniband"
    if pci.is_dir():
        names = sorted(p.name for p in pci.iterdir())
        return names[0] if names else hca
    guid = hca.lower().removeprefix("0x")
    for node in sorted(Path("/sys/class/infiniband").glob("*/node_guid")):
        if node.read_text().strip().replace(":", "") == guid:
            return node.parent.name
    return hca


class Probes:
    """The probes one run needs, each a callable returning findings; `state` is carried between
    runs (the last check's time for Xids, the IB error counters)."""

    def __init__(self, expect: dict, state: dict, timeout: float) -> None:
        self.expect, self.state, self.timeout, self.now = expect, state, timeout, time.time()
        self.new_state: dict = {"last_check": self.now}

    def gpu(self) -> list[Finding]:
        query = "--query-gpu=" + ",".join(checks.GPU_QUERY)
        return checks.gpu_findings(
            run(["nvidia-smi", query, "--format=csv"], self.timeout), self.expect
        )

    def amd_gpu(self) -> list[Finding]:
        vendors = [
            path.read_text()
            for path in sorted(Path("/sys/class/drm").glob("renderD*/device/vendor"))
        ]
        return checks.amd_gpu_findings(vendors, self.expect)

    def nvlink(self) -> list[Finding]:
        return checks.nvlink_findings(
            run(["nvidia-smi", "nvlink", "--status"], self.timeout), self.expect
        )

    def service(self, check: str, unit: str) -> list[Finding]:
        try:
            text = run(["systemctl", "is-active", unit], self.timeout)
        except ProbeError as error:  # is-active exits 3 with "inactive" on stdout; empty: failed
            text = str(error)
        return checks.service_findings(check, text, unit)

    def xid(self) -> list[Finding]:
        since = self.state.get("last_check")
        window = ["--since", f"@{int(since)}"] if since else ["-b"]
        argv = ["journalctl", "-k", "-q", "--no-pager", "-o", "short-unix", *window]
        return checks.xid_findings(run(argv, self.timeout), self.expect)

    def ib_port(self) -> list[Finding]:
        return checks.ib_port_findings(run(["ibstat"], self.timeout), self.expect)

    def ib_errors(self) -> list[Finding]:
        now = {}
        for hca in self.expect["fabric"]["hcas"]:
            name = _hca_name(hca)
            text = run(["perfquery", "-x", "-C", name, "-P", "1"], self.timeout)
            now[hca] = {"t": time.time(), "counters": checks.ib_counters(text)}
        self.new_state["ib"] = now
        return checks.ib_error_findings(self.state.get("ib", {}), now, self.expect)

    def mount(self) -> list[Finding]:
        return checks.mount_findings(Path("/proc/mounts").read_text(), self.expect)

    def time_sync(self) -> list[Finding]:
        """timedatectl's NTPSynchronized; when timedatectl cannot answer (no D-Bus, no systemd
        as PID 1, not installed), the kernel's own state, read as timedated reads it."""
        argv = ["timedatectl", "show", "-p", "NTPSynchronized", "--value"]
        try:
            return checks.time_findings(run(argv, self.timeout))
        except ProbeError as error:
            try:
                kernel = clock.read_kernel_clock()
            except OSError as clock_error:
                raise ProbeUnavailable(f"{error}; {clock_error}") from None
        return checks.kernel_time_findings(kernel.maxerror_us, kernel.status)

    def disk(self) -> list[Finding]:
        return checks.disk_findings(
            {p: free_mib(p) for p in self.expect["node"]["disks"]}, self.expect
        )

    def plan(self, wanted: set[str]) -> list[tuple[str, tuple[str, ...], object]]:
        """(probe name, the checks it yields, callable) for the probes `wanted` needs."""
        gpu, fabric = self.expect.get("gpu"), self.expect.get("fabric")
        probes: list[tuple[str, tuple[str, ...], object]] = []
        if gpu and gpu.get("vendor") == "amd":
            probes.append(("amd_gpu", checks.AMD_GPU_CHECKS, self.amd_gpu))
        elif gpu:
            probes.append(
                (
                    "gpu",
                    checks.GPU_QUERY_CHECKS,
                    self.gpu,
                )
            )
            if gpu.get("nvlink"):
                probes.append(("nvlink", ("nvlink",), self.nvlink))
            if gpu.get("fabric_manager"):
                probes.append(
                    (
                        "fabric_manager",
                        ("fabric_manager",),
                        lambda: self.service("fabric_manager", "nvidia-fabricmanager"),
                    )
                )
            probes.append(("xid", ("xid",), self.xid))
        if fabric:
            probes += [
                ("ib_port", ("ib_port",), self.ib_port),
                ("ib_errors", ("ib_errors",), self.ib_errors),
            ]
        probes += [
            ("mount", ("mount",), self.mount),
            ("time_sync", ("time_sync",), self.time_sync),
            ("slurmd", ("slurmd",), lambda: self.service("slurmd", "slurmd")),
            ("munge", ("munge",), lambda: self.service("munge", "munge")),
            ("disk", ("disk",), self.disk),
        ]
        return [p for p in probes if set(p[1]) & wanted]


def run_probes(expect: dict, state: dict, wanted: set[str]) -> tuple[list[Finding], dict]:
    """Every wanted probe at once, each within expect["timeout_s"] (plus a second for Python's
    own calls): findings in probe order, only the wanted checks, and the state to keep."""
    timeout = float(expect.get("timeout_s", 10))
    probes = Probes(expect, state, timeout)
    planned = probes.plan(wanted)
    pool = ThreadPoolExecutor(max_workers=max(1, len(planned)), thread_name_prefix="probe")
    futures = [(name, ids, pool.submit(call)) for name, ids, call in planned]
    deadline = time.monotonic() + timeout + 1
    findings: list[Finding] = []
    for name, ids, future in futures:
        try:
            found = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            found = [Finding(ids[0], False, f"probe {name} timed out after {timeout:g} s")]
        except ProbeError as error:
            found = [Finding(ids[0], False, f"probe {name}: {error}")]
        except ProbeUnavailable as error:
            found = [Finding(ids[0], None, f"probe {name} could not check: {error}")]
        except Exception as error:  # noqa: BLE001 - a probe's bug is a failed check, named
            found = [
                Finding(ids[0], False, f"probe {name} failed: {type(error).__name__}: {error}")
            ]
        findings += [f for f in found if f.check in wanted]
    pool.shutdown(wait=False, cancel_futures=True)  # a hung probe's thread is left behind
    return findings, {**state, **probes.new_state}


def slurm_action(
    expect: dict, findings: list[Finding], timeout: float, *, resume: bool = True
) -> Action:
    """Read this node in Slurm and apply kiln.health.decide's rule through scontrol; `resume`
    False (the Prolog) only ever drains."""
    name = expect["node"]["name"]
    try:
        info = node_drain(run(["scontrol", "show", "node", name], timeout), name)
    except ProbeError as error:
        return Action("none", why=f"scontrol show node failed ({error}): nothing changed")
    auto_resume = resume and bool(expect.get("auto_resume"))
    action = decide(findings, info, auto_resume=auto_resume)
    if action.verb == "none":
        return action
    update = ["scontrol", "update", f"nodename={name}"]
    update += (
        ["state=drain", f"reason={action.reason}"] if action.verb == "drain" else ["state=resume"]
    )
    try:
        run(update, timeout)
    except ProbeError as error:
        return Action("none", why=f"scontrol update failed ({error}): nothing changed")
    return action


def _write(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    temporary.replace(path)


def check(expect: dict, state_dir: Path, *, subset: str = "all", report: bool = False) -> dict:
    """One health check; the result document (also written to state_dir/last.json)."""
    started = time.monotonic()
    skip = set(expect.get("skip", []))
    wanted = set(checks.CHECKS if subset == "all" else expect.get("prolog_checks", [])) - skip
    state_file = state_dir / "state.json"
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        state = {}
    findings, new_state = run_probes(expect, state, wanted)
    ok = not any(f.failed for f in findings)
    action = Action("none", why="report only" if report else f"subset {subset}: healthy")
    # Slurm's run applies the whole rule. The Prolog drains a failing node itself, naming the
    # check, before its exit 1: Slurm's own drain ("Prolog error") is a no-op on a node already
    # drained (slurmctld's drain_nodes), so the reason operators see is kiln's. A passing Prolog
    # asks the controller nothing: it runs before every job.
    if not report and (subset == "all" or not ok):
        timeout = float(expect.get("timeout_s", 10))
        action = slurm_action(expect, findings, timeout, resume=subset == "all")
    document = {
        "kind": "kiln-health",
        "version": VERSION,
        "node": expect["node"]["name"],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "subset": subset,
        "duration_s": round(time.monotonic() - started, 3),
        "ok": ok,
        "findings": [f.to_dict() for f in findings],
        "action": {"verb": action.verb, "reason": action.reason, "why": action.why},
    }
    # Only Slurm's own run moves the Xid window and the counters on: a report or the Prolog's
    # subset must not hide an Xid from the next periodic check.
    if subset == "all" and not report:
        _write(state_file, new_state)
        _write(state_dir / "last.json", document)
    return document


def render(document: dict) -> str:
    """Text that folds: identical on healthy nodes (no times, no durations)."""
    findings = document["findings"]
    lines = [f"FAIL {f['check']}: {f['reading']}" for f in findings if f["ok"] is False]
    lines += [f"NOT CHECKED {f['check']}: {f['reading']}" for f in findings if f["ok"] is None]
    passed = sum(1 for f in findings if f["ok"])
    unchecked = sum(1 for f in findings if f["ok"] is None)
    summary = f"{passed} checks pass" + (f", {unchecked} could not check" if unchecked else "")
    lines.append(f"{'healthy' if document['ok'] else 'UNHEALTHY'}: {summary}")
    if document["action"]["verb"] != "none":
        lines.append(f"slurm: {document['action']['verb']} {document['action']['reason']}".rstrip())
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln-health", description=__doc__.split("\n")[0])
    parser.add_argument("--expect", default=EXPECT, help="the expectations JSON kiln wrote")
    parser.add_argument("--state-dir", default=STATE_DIR, help="last.json and state.json")
    parser.add_argument("--subset", choices=("all", "prolog"), default="all")
    parser.add_argument("--report", action="store_true", help="change nothing in Slurm")
    parser.add_argument("--json", action="store_true", help="the result document as JSON")
    args = parser.parse_args(argv)
    try:
        expect = json.loads(Path(args.expect).read_text())
    except (OSError, ValueError) as error:
        print(f"kiln-health: cannot read {args.expect}: {error}", file=sys.stderr)
        return 2
    document = check(expect, Path(args.state_dir), subset=args.subset, report=args.report)
    sys.stdout.write(json.dumps(document) + "\n" if args.json else render(document))
    sys.stdout.flush()
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    # os._exit: a probe hung in the kernel (an NFS statvfs) must not hold the exit.
    code = main()
    sys.stderr.flush()
    os._exit(code)
