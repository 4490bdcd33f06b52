"""The program kiln runs on a worker controller around `ansible-runner worker`: a lease.

Standard library only, Python 3.8+: kiln ships this file's source to the worker (`python3 -c`),
nothing else is installed for it there.

    run LEASE DIR -- ARGV...   read the job from stdin (a line with its length in bytes, then
                               the bytes: ansible-runner transmit's stream), start ARGV (the
                               worker's ansible-runner) with the job on its stdin and its stdout
                               on ours, then keep reading stdin: kiln writes a heartbeat (one
                               byte) every few seconds, and "." once it has read the whole stream.
                               When no heartbeat came for LEASE seconds, or stdin closed before
                               that ".", every process of the job is killed (its own
                               process group and every process naming DIR, ansible-playbook
                               included: it runs in a session of its own). Exits with ARGV's
                               status.
    stop DIR                   kill every process naming DIR (kiln fencing a worker it lost).

Why: a worker whose stream kiln lost may still be running the shard (the network between them
broke, not the worker). kiln runs that shard again elsewhere only after the worker's job is
gone: stopped by `stop` when kiln can still reach the worker, else dead by its own lease,
which kiln waits out. So no two runs of one shard act on a node at once.
"""

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

SPARED = (os.getpid(), os.getppid())  # this program, and the shell ssh may have run it from
HEARTBEAT = b"\n"
DONE = b"."  # kiln read the whole stream


def naming(directory):
    """Pids of the processes whose command line names `directory`, SPARED excepted."""
    needle = directory.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in SPARED:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def kill_job(directory, group=None):
    """SIGKILL the job's process group and every process naming its directory."""
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    for pid in naming(directory):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def read_exactly(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"job cut short: {left} of {size} bytes missing")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_header(fd):
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError("no job on stdin")
        line += byte
    return int(line)


def run(lease, directory, argv):
    stdin = sys.stdin.fileno()
    job = read_exactly(stdin, read_header(stdin))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, start_new_session=True)
    proc.stdin.write(job)
    proc.stdin.close()
    heard = time.monotonic()
    while proc.poll() is None:
        ready, _, _ = select.select([stdin], [], [], 1.0)
        if ready:
            data = os.read(stdin, 4096)
            if DONE in data:  # kiln has the whole stream: let the job end as it will
                break
            if not data:  # kiln's end closed: nobody will read the stream
                kill_job(directory, proc.pid)
                break
            heard = time.monotonic()
        elif time.monotonic() - heard > lease:
            sys.stderr.write(f"kiln worker: no heartbeat for {lease:.0f}s, job killed\n")
            kill_job(directory, proc.pid)
            break
    return proc.wait()


def main(args):
    if args[:1] == ["stop"] and len(args) == 2:
        kill_job(args[1])
        return 0
    if args[:1] == ["run"] and len(args) > 4 and args[3] == "--":
        return run(float(args[1]), args[2], args[4:])
    sys.stderr.write("usage: run LEASE DIR -- ARGV... | stop DIR\n")
    return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(code if code >= 0 else 128 - code)
