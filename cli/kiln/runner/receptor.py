"""Worker controllers through a Receptor mesh: a shard's job as a work unit on the worker.

kiln.runner.stream runs a worker shard by starting a command that takes the transmitted job (its
length, then the bytes) and heartbeats on stdin and gives ansible-runner's process stream on
stdout: `ssh WORKER -- worker_side run ...` by default. With `kiln_rollout.worker_transport:
receptor` that command is this module, run by kiln's own Python:

    python -m kiln.runner.receptor run  MESH --node W --lease L --dir D -- ARGV
    python -m kiln.runner.receptor stop MESH --node W --dir D
    (MESH: --socket S [--ca F --cert F --key F])

`run` submits the job as a `kiln` work unit on node W (the worker's Receptor runs `python3 -m
kiln.runner.worker_side receptor-run L D -- ARGV` with the job as its payload) and copies the
unit's results, ansible-runner's stream, to stdout as they come. Each heartbeat kiln writes
becomes a short `beat D` unit on W, which renews the job's lease there; a beat that cannot reach
W counts against it, and after MAX_MISSED in a row (about 30 s, as ssh's keep-alives) `run`
gives up with 255: the pool then fences the worker (`stop`, else its lease runs out) and runs
the shard elsewhere (kiln.runner.pool). A beat that finds the job gone while its unit runs on
(the job killed together with Receptor's command runner, which would have ended the unit) ends
the wait too, GRACE_S later. Exit status: the job's own; 255 when W was lost; 1 when its job
went without its unit ending.

Every unit is released once read, on the worker too. Receptor's control protocol is spoken by
receptorctl, Receptor's own client library.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import shlex
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from kiln.runner import worker_side

if TYPE_CHECKING:
    from receptorctl.socket_interface import ReceptorControl

WORKTYPE = "kiln"  # the work-command the mesh role configures on every worker
MAX_MISSED = 3
CALL_TIMEOUT_S = 20.0
LOST = 255  # as ssh exits when it loses its connection
GRACE_S = 15.0  # a job found gone may be one that just ended: its stream has this long to end
_EXIT = re.compile(r"exit status (\d+)")


@dataclass(frozen=True, slots=True)
class Mesh:
    """A Receptor control service and kiln's TLS client credentials for it."""

    socket: str
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def control(self) -> ReceptorControl:
        # imported here: receptorctl's package loads its CLI (click, dateutil: about 70 ms),
        # which kiln's start-up does not pay unless a run uses the mesh
        from receptorctl.socket_interface import ReceptorControl

        return ReceptorControl(self.socket, rootcas=self.ca, cert=self.cert, key=self.key)

    def argv(self) -> list[str]:
        args = ["--socket", self.socket]
        for name in ("ca", "cert", "key"):
            if getattr(self, name):
                args += [f"--{name}", os.path.expanduser(str(getattr(self, name)))]
        return args


def run_argv(mesh: Mesh, node: str, lease: float, directory: str, job: Sequence[str]) -> list[str]:
    """The command kiln.runner.stream starts for a shard on worker `node`."""
    return [
        sys.executable, "-m", "kiln.runner.receptor", "run", *mesh.argv(),
        "--node", node, "--lease", f"{lease:g}", "--dir", directory, "--", *job,
    ]  # fmt: skip


def stop_argv(mesh: Mesh, node: str, directory: str) -> list[str]:
    return [
        sys.executable, "-m", "kiln.runner.receptor", "stop", *mesh.argv(),
        "--node", node, "--dir", directory,
    ]  # fmt: skip


def exit_code(status: dict[str, Any]) -> int:
    """A finished unit's exit status from its `work status` (1 when it names none)."""
    if status.get("StateName") == "Succeeded":
        return 0
    found = _EXIT.search(str(status.get("Detail", "")))
    return (int(found.group(1)) or 1) if found else 1


def submit(mesh: Mesh, node: str, args: Sequence[str], payload: bytes = b"") -> str:
    result = mesh.control().submit_work(
        WORKTYPE,
        payload,
        node=node,
        params={"params": shlex.join(args)},  # split as a shell would
    )
    return str(result["unitid"])


def status(mesh: Mesh, unit: str) -> dict[str, Any]:
    return mesh.control().simple_command(f"work status {unit}")


def release(mesh: Mesh, unit: str) -> None:
    # best effort: an unreleased unit costs a directory, not correctness
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        mesh.control().simple_command(f"work release {unit}")


def _within(timeout: float, call: Callable[[], Any]) -> Any:
    """`call()` in a thread, None when it raised or did not return within `timeout`."""
    box: list[Any] = []

    def target() -> None:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            box.append(call())

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return box[0] if box else None


def call(mesh: Mesh, node: str, args: Sequence[str], timeout: float = CALL_TIMEOUT_S) -> int | None:
    """A short unit on `node` run to its end: its exit status, None when it did not end
    within `timeout` (the worker not reached)."""

    def whole() -> int:
        unit = submit(mesh, node, args)
        try:
            mesh.control().get_work_results(unit).read()  # ends when the unit does
            return exit_code(status(mesh, unit))
        finally:
            release(mesh, unit)

    return _within(timeout, whole)


def _copy(source: BinaryIO, done: threading.Event) -> None:
    out = sys.stdout.buffer
    try:
        while chunk := source.read1(1 << 16):  # type: ignore[attr-defined]
            out.write(chunk)
            out.flush()
    except OSError:
        pass
    finally:
        done.set()


def run(mesh: Mesh, node: str, lease: float, directory: str, job_argv: Sequence[str]) -> int:
    stdin = sys.stdin.fileno()
    job = worker_side.read_exactly(stdin, worker_side.read_header(stdin))
    args = ["receptor-run", f"{lease:g}", directory, "--", *job_argv]
    unit = submit(mesh, node, args, job)
    done = threading.Event()
    results = mesh.control().get_work_results(unit)
    threading.Thread(target=_copy, args=(results, done), daemon=True).start()
    missed = 0
    while not done.is_set():
        ready, _, _ = select.select([stdin], [], [], 1.0)
        if not ready:
            continue
        data = os.read(stdin, 4096)
        if not data:  # kiln's end closed before the stream did: nobody reads it
            call(mesh, node, ["stop", directory])
            release(mesh, unit)
            return 1
        if worker_side.HEARTBEAT in data and worker_side.DONE not in data:
            renewed = call(mesh, node, ["beat", directory])
            missed = missed + 1 if renewed is None else 0
            if missed >= MAX_MISSED:
                sys.stderr.write(
                    f"kiln: worker {node} not reached through the Receptor mesh "
                    f"({missed} heartbeats in a row)\n"
                )
                return LOST
            if renewed == worker_side.GONE and not done.wait(GRACE_S):
                # the job is gone but its unit runs on: its command runner died with it
                sys.stderr.write(f"kiln: the job on worker {node} is gone, its unit unfinished\n")
                release(mesh, unit)
                return 1
    code = exit_code(_within(CALL_TIMEOUT_S, lambda: status(mesh, unit)) or {})
    release(mesh, unit)
    return code


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the job's argv (everything after `--`)."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="python -m kiln.runner.receptor")
    parser.add_argument("action", choices=("run", "stop"))
    parser.add_argument("--socket", required=True)
    parser.add_argument("--ca")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--node", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--lease", type=float, default=60.0)
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def main(argv: Sequence[str]) -> int:
    args, job = parse(argv)
    mesh = Mesh(args.socket, args.ca, args.cert, args.key)
    if args.action == "stop":
        return 0 if call(mesh, args.node, ["stop", args.dir]) == 0 else 1
    try:
        return run(mesh, args.node, args.lease, args.dir, job)
    except (OSError, RuntimeError, ValueError) as exc:  # the mesh refused or is not there
        sys.stderr.write(f"kiln: Receptor at {args.socket}: {exc}\n")
        return LOST


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
