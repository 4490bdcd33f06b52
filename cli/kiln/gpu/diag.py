"""The DCGM check after a driver upgrade: may the node go back into Slurm?

    verdict = upgrade_check(registered, installed=True)   # the role's `dcgmi diag --run 1`
    # {"validated": bool, "failed": bool, "why": str}

nvidia_driver runs DCGM's quick diagnostic (`dcgmi diag -r 1`: the deployment checks, which is
what proves that the new driver, NVML and CUDA load and answer) on each upgraded node before it
is resumed. Not run is never passed: only a diagnostic that ran and passed every deployment test
resumes the node. Everything else keeps it drained, its drain reason saying why:

- failed:        a test failed (named with its scope and DCGM's message);
- not validated: dcgmi is not installed; nv-hostengine does not answer (dcgmi prints "Error:
  unable to establish a connection to the specified host"); the output cannot be read or holds
  no deployment test; a deployment test was skipped, not run or warned (a warning after a
  driver change is a node to look at, not one to put back unseen); dcgmi exited non-zero with
  no test failed (killed, crashed).

Burn-in judges its longer DCGM levels in kiln.judging.rules_dcgm; this is the upgrade's gate.
"""

from __future__ import annotations

from collections.abc import Mapping

from kiln.parsers import ParseError
from kiln.parsers.dcgmi import DiagTest, parse_diag

LEVEL = 1
MESSAGE_MAX = 300
NO_HOSTENGINE = (
    "unable to establish a connection to the specified host",
    "unable to connect to host engine",
)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def _verdict(validated: bool, failed: bool, why: str) -> dict[str, object]:
    return {"validated": validated, "failed": failed, "why": _clip(why)}


def _not_validated(why: str) -> dict[str, object]:
    return _verdict(False, False, f"not validated: {why}")


def _refused(text: str) -> str | None:
    for line in text.splitlines():
        if any(marker in line.lower() for marker in NO_HOSTENGINE):
            return line.strip()
    return None


def _where(test: DiagTest) -> str:
    failing = [f"{e.kind} {e.id}" for e in test.entities if e.result == "Fail"]
    if failing:
        return ", ".join(failing)
    scope = (test.scope or "").strip()
    return "all GPUs" if scope in ("", "All") else scope


def _unproven(test: DiagTest) -> bool:
    """A deployment test that did not pass outright, on the whole or on any GPU."""
    return test.result != "Pass" or any(e.result != "Pass" for e in test.entities)


def upgrade_check(result: Mapping, installed: bool) -> dict[str, object]:
    """The verdict on what Ansible registered for `dcgmi diag --run 1` (rc, stdout, stderr), or
    on a skipped task where dcgmi is not `installed`."""
    if not installed or result.get("skipped"):
        return _not_validated("dcgmi is not installed (DCGM: the nvidia_dcgm role)")
    rc = result.get("rc")
    stdout = str(result.get("stdout") or "")
    stderr = str(result.get("stderr") or "").strip()
    refused = _refused(stdout + "\n" + stderr)
    if refused:
        return _not_validated(
            f"nv-hostengine does not answer (dcgmi exit {rc}: {refused}); start nvidia-dcgm"
        )
    try:
        report = parse_diag(stdout)
    except ParseError as error:
        said = (stderr or stdout.strip())[:200]
        return _not_validated(
            f"unreadable dcgmi diag output (exit {rc}; {error})" + (f": {said}" if said else "")
        )
    if report.failed:
        return _verdict(False, True, "failed: " + "; ".join(
            f"{t.name} ({_where(t)}): {t.warnings or t.message or t.result}" for t in report.failed
        ))  # fmt: skip
    if report.runtime_error:
        return _not_validated(f"dcgmi could not run the tests: {report.runtime_error}")
    deployment = [t for t in report.tests if t.key == "software"]
    if not deployment:
        return _not_validated(f"dcgmi diag -r {LEVEL} printed no deployment test")
    unproven = [t for t in deployment if _unproven(t)]
    if unproven:
        return _not_validated("; ".join(
            f"{t.name} {t.result}" + (f": {t.warnings or t.message}" if t.notes else "")
            for t in unproven
        ))  # fmt: skip
    if rc not in (0, None):
        return _not_validated(
            f"dcgmi exited {rc} with no test failed" + (f" ({stderr[:200]})" if stderr else "")
        )
    return _verdict(True, False, f"dcgm r{LEVEL}: {len(deployment)} deployment test(s) passed")


__all__ = ["upgrade_check"]
