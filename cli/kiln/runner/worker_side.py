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

Through a Receptor mesh (kiln.runner.receptor) a work unit's stdin is its payload alone, so the
lease is kept in a file instead; Receptor runs this module (`python3 -m kiln.runner.worker_side`,
the worker's kiln) with these arguments:

    receptor-run LEASE DIR -- ARGV   the job is the whole of stdin; ARGV must be an
                               `ansible-runner worker` command. The lease is DIR.beat's age:
                               each `beat` renews it, and a job whose lease is older than
                               LEASE seconds is killed as above. ARGV's stderr goes to
                               DIR.stderr (Receptor mixes a unit's stderr into its stdout, which
                               must carry ansible-runner's stream alone). SIGTERM or SIGINT
                               (Receptor cancelling the unit) kills the job too.
    beat DIR                   renew DIR's lease; exits GONE (3) when no job holds it

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
                cmdline = f.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        # Receptor's command runner of the job's unit is spared: it reports the job's end,
        # which ends the unit (killed, the unit would run on in Receptor's books).
        if needle in cmdline and b"--command-runner" not in cmdline:
            found.append(int(entry))
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


def beat_file(directory):
    return directory.rstrip("/") + ".beat"


def stderr_file(directory):
    return directory.rstrip("/") + ".stderr"


GONE = 3  # `beat`'s exit status when the job it would renew no longer runs


def beat(directory):
    """Renew the lease of the job in `directory`: 0, or GONE when no job holds it (it ended,
    or was killed with Receptor's command runner, whose unit then never ends by itself)."""
    path = beat_file(directory)
    try:
        with open(path) as lease:
            pid = int(lease.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as proc:
            cmdline = proc.read()
    except (OSError, ValueError):
        return GONE
    if directory.encode() not in cmdline:
        return GONE
    os.utime(path)
    return 0


def is_runner_worker(argv):
    return len(argv) > 1 and os.path.basename(argv[0]) == "ansible-runner" and argv[1] == "worker"


def run_leased_by_file(lease, directory, argv):
    """`receptor-run`: the job from the whole of stdin, the lease from DIR.beat's age."""
    if not is_runner_worker(argv):
        sys.stderr.write("kiln worker: only `ansible-runner worker` runs here\n")
        return 2
    job = sys.stdin.buffer.read()
    lease_path = beat_file(directory)
    parent = os.path.dirname(lease_path)
    os.makedirs(parent, exist_ok=True)
    with open(lease_path, "w") as holder:
        holder.write(str(os.getpid()))  # the lease starts now, held by this process
    with open(stderr_file(directory), "ab") as stderr:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=stderr, start_new_session=True)

    def cancelled(signum, frame):
        kill_job(directory, proc.pid)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, cancelled)
    signal.signal(signal.SIGINT, cancelled)
    proc.stdin.write(job)
    proc.stdin.close()
    try:
        while proc.poll() is None:
            time.sleep(1.0)
            try:
                age = time.time() - os.stat(lease_path).st_mtime
            except FileNotFoundError:
                age = lease + 1  # removed from outside: no lease left
            if age > lease:
                with open(stderr_file(directory), "ab") as err:
                    err.write(b"kiln worker: no heartbeat for %ds, job killed\n" % int(lease))
                kill_job(directory, proc.pid)
                break
        code = proc.wait()
        if code == 0:  # kept for a failed job's post-mortem only
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stderr_file(directory))
        return code
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lease_path)


def main(args):
    if args[:1] == ["stop"] and len(args) == 2:
        kill_job(args[1])
        return 0
    if args[:1] == ["beat"] and len(args) == 2:
        return beat(args[1])
    if args[:1] == ["run"] and len(args) > 4 and args[3] == "--":
        return run(float(args[1]), args[2], args[4:])
    if args[:1] == ["receptor-run"] and len(args) > 4 and args[3] == "--":
        return run_leased_by_file(float(args[1]), args[2], args[4:])
    sys.stderr.write("usage: run|receptor-run LEASE DIR -- ARGV... | beat DIR | stop DIR\n")
    return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(code if code >= 0 else 128 - code)
