"""Benchmark: `kiln exec -- true` over N local SSH targets beside `ansible -m command -a true`.

Targets are 127.0.0.2 .. 127.0.0.(N+1), all served by one throwaway sshd (tests/sshd_fixture.py)
with MaxStartups raised so it refuses nothing. Both tools read the same inventory: the same
user, key, port and known_hosts (StrictHostKeyChecking=yes), the same fanout (ansible -f), and
both start cold (ansible gets a fresh ControlPath directory, so no ControlPersist master from an
earlier run helps it; pipelining is on, as in kiln's inventories). Wall time of each whole
process, every node checked to have answered, and the ratio. Goal (issue 10): kiln <= 0.2 x.
Needs /usr/sbin/sshd (apt-get install openssh-server).

Both tools run the command through the login user's shell; Debian's bash sources ~/.bashrc for
SSH commands, and a heavy one (pyenv init: ~0.2 s) then dominates both. `--plain-user` (root
only) logs in as a throwaway user with /bin/sh and an empty home instead (useradd, removed
afterwards), so the figures show the tools' own cost.

`--before SRC` also times a second kiln source tree (e.g. `git archive HEAD cli | tar -x -C
/tmp/before`, then `--before /tmp/before/cli`): each of --repeat rounds runs both, in turn, on
the same sshd (paired), both must answer on every node; min and median of each and the ratio
after/before of the mins (issue 21: the fabric-based fan-out may lose at most 10%).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from sshd_fixture import SSHD, start_sshd, stop_sshd  # noqa: E402

BIN = Path(sys.executable).parent
PLAIN_USER = "kiln-bench"


@contextlib.contextmanager
def plain_user(home: Path):
    """A throwaway login user with /bin/sh and an empty home; removed on exit."""
    with contextlib.suppress(KeyError):
        pwd.getpwnam(PLAIN_USER)
        sys.exit(f"user {PLAIN_USER} exists already; remove it first (userdel {PLAIN_USER})")
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/sh",
         "--no-user-group", "--gid", "nogroup", "--password", "*", PLAIN_USER],
        check=True,
    )  # fmt: skip
    try:
        home.mkdir(parents=True)
        shutil.chown(home, PLAIN_USER)
        home.parent.chmod(0o755)
        yield PLAIN_USER
    finally:
        for _ in range(20):  # its sshd sessions end a moment after their clients do
            if subprocess.run(["userdel", PLAIN_USER], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        else:
            print(f"warning: could not remove user {PLAIN_USER}: userdel {PLAIN_USER}")


def close_masters(control_dir: Path) -> None:
    """End the ControlPersist masters ansible left behind (they would outlive the sshd)."""
    for socket_path in control_dir.glob("*"):
        subprocess.run(
            ["ssh", "-O", "exit", "-o", f"ControlPath={socket_path}", "unused"],
            capture_output=True, check=False,
        )  # fmt: skip


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        bad = ""
        with contextlib.suppress(ValueError, KeyError):
            nodes = json.loads(proc.stdout)["nodes"]
            bad = "".join(f"{n['name']}: {n['error']}\n" for n in nodes if n["status"] != "ok")
        sys.exit(f"{command[0]} failed ({proc.returncode}):\n{bad or proc.stdout[-2000:]}"
                 f"{proc.stderr}")  # fmt: skip
    return wall, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=64)
    parser.add_argument("--skip-ansible", action="store_true")
    parser.add_argument("--plain-user", action="store_true", help="see the module docstring")
    parser.add_argument("--before", type=Path, help="another kiln source tree (its cli/)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (paired with --before)")
    args = parser.parse_args()
    if not SSHD.exists():
        sys.exit(f"{SSHD} is missing: apt-get install openssh-server")
    addresses = [f"127.0.0.{2 + i}" if i < 254 else f"127.0.1.{i - 252}" for i in range(args.hosts)]
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kiln-bench-exec-")))
        user = stack.enter_context(plain_user(root / "home")) if args.plain_user else None
        server = start_sshd(root / "sshd", addresses, max_startups=4 * args.hosts)
        try:
            names = ["ctl01"] + [f"gpu{i:03d}" for i in range(1, args.hosts)]
            hosts = dict(zip(names, addresses, strict=True))
            inventory = server.write_inventory(root, hosts, user=user)
            kiln = [str(BIN / "kiln"), "exec", str(inventory), "--fanout", str(args.fanout),
                    "--json", "--", "true"]  # fmt: skip
            sides = {"kiln": None}
            if args.before:
                sides["before"] = {**os.environ, "PYTHONPATH": str(args.before.resolve())}
            walls: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.repeat):
                for side, side_env in sides.items():
                    wall, out = timed(kiln, side_env)
                    counts = json.loads(out)["counts"]
                    assert counts["ok"] == args.hosts, (side, counts)
                    walls[side].append(wall)
            kiln_s = min(walls["kiln"])
            if args.before:
                for side, times in walls.items():
                    median = statistics.median(times)
                    print(f"kiln exec {side:<6} min {min(times):6.2f} s  median {median:6.2f} s")
                ratio = kiln_s / min(walls["before"])
                verdict = "meets" if ratio <= 1.10 else "misses"
                print(f"ratio after/before: {ratio:.3f} ({verdict} the goal of <= 1.10)")
            login = f"as {user or 'the current user'}"
            print(f"kiln exec  {args.hosts} hosts, fanout {args.fanout}, {login}: {kiln_s:6.2f} s")
            if args.skip_ansible:
                return 0
            env = {
                **os.environ,
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(root / "cp"),
                "ANSIBLE_PIPELINING": "true",
                "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
                "ANSIBLE_LOCAL_TEMP": str(root / "ansible-tmp"),
            }
            try:
                ansible_s, out = timed(
                    [str(BIN / "ansible"), "-i", str(inventory), "all", "-m", "command",
                     "-a", "true", "-f", str(args.fanout), "-o"], env,
                )  # fmt: skip
            finally:
                close_masters(root / "cp")
            answered = sum(" | CHANGED | rc=0" in line for line in out.splitlines())
            assert answered == args.hosts, out[-2000:]
            print(f"ansible    {args.hosts} hosts, -f {args.fanout}, {login}: {ansible_s:6.2f} s")
            ratio = kiln_s / ansible_s
            verdict = "meets" if ratio <= 0.2 else "misses"
            print(f"ratio kiln/ansible: {ratio:.3f} ({verdict} the goal of <= 0.2)")
        finally:
            stop_sshd(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
