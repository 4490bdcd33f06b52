#!/usr/bin/env python3
"""kiln burn-in all-reduce launcher: nccl-tests' all_reduce_perf where it is built, else torch.

Standalone (stdlib only, no kiln import). A job runs it once, in its batch step (not under srun);
it chooses the implementation and starts it with srun over the job's nodes, one rank per GPU
(one per node on CPU-only nodes), then prints one JSON document on stdout:

    kiln-burnin allreduce_launch --ntasks-per-node 8 --backend nccl --iters 50 --ring

  nccl-tests  GPU jobs (--backend nccl) where NCCL_TESTS is executable: the nccl stage builds it
              against the NCCL kiln pins, with MPI=1 on Open MPI/PMIx, into
              /opt/kiln/nccl-tests/current/build/all_reduce_perf; srun starts it over PMIx:
                srun --mpi=pmix --kill-on-bad-exit=1 --ntasks-per-node=G all_reduce_perf
                     -b MIN -e MAX -f 2 -g 1 -w WARMUP -n ITERS -c 1 -d float -o sum
              Its document carries the tool's own output ("output"); kiln reads it when it
              collects the run (kiln.burnin.nccl_tests, with kiln.parsers.nccl_tests) and adds
              the rows, hosts, bus bandwidth and `wrong` (the #wrong total).
  torch       CPU-only jobs (--backend gloo), GPU jobs without nccl-tests, and GPU jobs whose
              nccl-tests could not start (no result table: srun without PMIx, MPI init failed):
                srun --kill-on-bad-exit=1 --ntasks-per-node=G python3 allreduce.py ARGS
              allreduce.py's document as it prints it (implementation "torch", wrong 0), with
              "fallback" saying why nccl-tests did not run where it was built.
  in an image with KILN_BURNIN_CONTAINER set (kiln_burnin.container: srun's options for the
              image): torch, in the image, as users' jobs run; the image's python3 is given
              allreduce.py's text, so the image needs nothing of kiln's and nothing is mounted:
                srun --kill-on-bad-exit=1 --ntasks-per-node=G OPTIONS python3 -c TEXT ARGS
              its document says "container": the options.

Ranks that could not connect (allreduce.py says so: RENDEZVOUS_FAILED) are started once more, on
a port free on this node; the document then says `rendezvous_retries`. A failure after they
connected is never retried: it is the result.

A nccl-tests run that printed its whole table (its footer "# Out of bounds values") is a result
even when it exits 1: it does when values were wrong, and kiln judges `wrong`. One that stopped
part-way prints nothing on stdout (the job keeps no result: a failure) and its output goes to
stderr, into the job's log.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

SCHEMA_VERSION = 1
NCCL_TESTS = "/opt/kiln/nccl-tests/current/build/all_reduce_perf"
NCCL_TESTS_ENV = "KILN_BURNIN_NCCL_TESTS"  # the burnin role's launcher sets it
CONTAINER_ENV = "KILN_BURNIN_CONTAINER"  # the job script sets it (kiln.burnin.jobs.Container)
TABLE = re.compile(r"^#\s+size\s+count\s+type", re.MULTILINE)  # the result table's header
FOOTER = "# Out of bounds values"
TAIL = 2000  # characters of a failed run's output kept in `fallback`
# allreduce.py's words when its ranks could not connect (the same there): started once more.
RENDEZVOUS_FAILED = "allreduce: the ranks could not connect"


def nccl_tests_path(args: argparse.Namespace, env: dict[str, str]) -> str:
    return args.nccl_tests or env.get(NCCL_TESTS_ENV) or NCCL_TESTS


def choose(args: argparse.Namespace, env: dict[str, str]) -> tuple[str, str | None]:
    """(implementation, why not nccl-tests): "nccl-tests" only on GPU jobs with the binary."""
    if args.implementation == "torch":
        return "torch", None
    if container_options(env):
        if args.implementation == "nccl-tests":
            raise SystemExit("allreduce_launch: nccl-tests is the host's, not the image's")
        return "torch", None
    if args.backend != "nccl":
        if args.implementation == "nccl-tests":
            raise SystemExit("allreduce_launch: nccl-tests needs --backend nccl (GPUs)")
        return "torch", None
    path = nccl_tests_path(args, env)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return "nccl-tests", None
    if args.implementation == "nccl-tests":
        raise SystemExit(f"allreduce_launch: nccl-tests not built at {path}")
    return "torch", f"nccl-tests not built at {path}"


def sizes(args: argparse.Namespace) -> tuple[int, int]:
    """(min, max) bytes of the sweep: allreduce.py's defaults (GPU 1 MiB..1 GiB, CPU 1..16 MiB)."""
    gpu = args.backend == "nccl"
    low = args.min_bytes or (1 << 20 if gpu else 1 << 10)
    high = args.max_bytes or (1 << 30 if gpu else 16 << 20)
    return low, high


def container_options(env: dict[str, str]) -> list[str]:
    """srun's options for the declared image (none: the host's runtime)."""
    return shlex.split(env.get(CONTAINER_ENV, ""))


def srun(args: argparse.Namespace, *extra: str) -> list[str]:
    return ["srun", *extra, "--kill-on-bad-exit=1", f"--ntasks-per-node={args.ntasks_per_node}"]


def nccl_tests_command(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    low, high = sizes(args)
    return [
        *srun(args, "--mpi=pmix"),
        nccl_tests_path(args, env),
        *("-b", str(low), "-e", str(high), "-f", "2", "-g", "1"),
        *("-w", str(args.warmup), "-n", str(args.iters)),
        *("-c", "1", "-d", "float", "-o", "sum"),
    ]


def torch_command(
    args: argparse.Namespace, python: str = sys.executable, container: Sequence[str] = ()
) -> list[str]:
    """allreduce.py over srun: with the host's python, or in the image (`container`, srun's
    options) with the image's python3 given the workload's text."""
    workload = str(Path(__file__).with_name("allreduce.py"))
    forwarded = [
        *("--iters", str(args.iters), "--warmup", str(args.warmup)),
        *("--timeout", f"{args.timeout:g}", "--backend", args.backend),
    ]
    for flag, value in (
        ("--min-bytes", args.min_bytes),
        ("--max-bytes", args.max_bytes),
        ("--verdict-bytes", args.verdict_bytes),
    ):
        if value:
            forwarded += [flag, str(value)]
    if args.ring:
        forwarded.append("--ring")
    if container:
        text = Path(workload).read_text(encoding="utf-8")
        return [*srun(args), *container, "python3", "-c", text, *forwarded]
    return [*srun(args), python, workload, *forwarded]


def run(cmd: list[str], env: dict[str, str], stream: bool) -> subprocess.CompletedProcess:
    """Run `cmd`, its stdout and stderr kept; with `stream` its stderr also goes into the
    job's log as it comes (a job killed at its time limit has logged it)."""
    shown = [a if len(a) < 256 else f"[{len(a)} characters]" for a in cmd]  # a workload's text
    print(f"allreduce_launch: {shlex.join(shown)}", file=sys.stderr, flush=True)
    try:
        if not stream:
            return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except OSError as exc:  # srun itself missing
        return subprocess.CompletedProcess(cmd, 127, "", str(exc))
    seen: list[str] = []

    def copy_stderr() -> None:  # into the job's log, and kept
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            seen.append(line)

    copier = threading.Thread(target=copy_stderr, daemon=True)
    copier.start()
    stdout = proc.stdout.read()
    proc.wait()
    copier.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, "".join(seen))


def free_port() -> int:
    """A TCP port free on this host, the job's first node (the ranks' rendezvous master)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def run_torch(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, int]:
    """The torch all-reduce over srun, started once more (on a fresh port) when its ranks could
    not connect, never for a failure after they did; (the last run, the retries)."""
    proc = run(cmd, env, stream=True)
    if proc.returncode == 0 or RENDEZVOUS_FAILED not in proc.stderr:
        return proc, 0
    print(f"allreduce_launch: {RENDEZVOUS_FAILED}; starting them once more", file=sys.stderr)
    return run(cmd, {**env, "MASTER_PORT": str(free_port())}, stream=True), 1


def nccl_tests_document(
    args: argparse.Namespace, cmd: list[str], proc: subprocess.CompletedProcess[str]
) -> dict:
    """What kiln completes at collection: the output as printed, and how it was made."""
    _, high = sizes(args)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "allreduce",
        "implementation": "nccl-tests",
        "hostname": socket.gethostname().split(".")[0],
        "command": cmd,
        "returncode": proc.returncode,
        "nccl_algo": os.environ.get("NCCL_ALGO"),
        "ntasks_per_node": args.ntasks_per_node,
        "warmup": args.warmup,
        "iters": args.iters,
        "verdict_bytes": args.verdict_bytes or high,
        "output": proc.stdout,
    }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="kiln burn-in: launch the all-reduce over srun")
    parser.add_argument("--ntasks-per-node", type=int, default=1, help="ranks per node (GPUs)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--implementation", choices=("auto", "nccl-tests", "torch"), default="auto")
    parser.add_argument("--nccl-tests", default=None, help=f"all_reduce_perf ({NCCL_TESTS})")
    parser.add_argument("--min-bytes", type=int, default=None)
    parser.add_argument("--max-bytes", type=int, default=None)
    parser.add_argument("--verdict-bytes", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600, help="torch's collective timeout")
    parser.add_argument("--ring", action="store_true", help="NCCL_ALGO=Ring for every rank")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.ring:
        os.environ["NCCL_ALGO"] = "Ring"  # srun passes the environment to every rank
    env = dict(os.environ)
    implementation, fallback = choose(args, env)
    if implementation == "nccl-tests":
        cmd = nccl_tests_command(args, env)
        proc = run(cmd, env, stream=False)
        if FOOTER in proc.stdout:
            sys.stderr.write(proc.stderr)
            json.dump(nccl_tests_document(args, cmd, proc), sys.stdout, indent=1)
            sys.stdout.write("\n")
            return 0
        sys.stderr.write(proc.stdout + proc.stderr)
        if TABLE.search(proc.stdout) or args.implementation == "nccl-tests":
            return proc.returncode or 1  # started and stopped part-way: no result
        tail = (proc.stdout + proc.stderr).strip()[-TAIL:]
        fallback = f"nccl-tests exited {proc.returncode} before its table: {tail}"
    container = container_options(env)
    cmd = torch_command(args, container=container)
    proc, retries = run_torch(cmd, env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        return proc.returncode
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        sys.stderr.write(proc.stdout)
        print("allreduce_launch: the torch all-reduce printed no JSON document", file=sys.stderr)
        return 1
    doc.setdefault("implementation", "torch")
    doc.setdefault("wrong", 0)
    if fallback:
        doc["fallback"] = fallback
    if retries:
        doc["rendezvous_retries"] = retries
    if container:
        doc["container"] = container
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
