"""A restart is never lost: a run killed between the configuration copy and the daemon restart
restarts on the next apply.

The slurm stage runs on a copy of the sandbox inventory whose nodes declare one MiB less
RealMemory (a NodeName change: slurmctld and every slurmd must restart). As soon as the new
slurm.conf is on the controller and on a node, the whole `kiln provision` process tree is
killed with SIGKILL, for real: no marker is written by hand. The daemons have not restarted,
yet the restart-pending marker is there (it is written before the copy). The re-apply then
restarts slurmctld and slurmd (each started after the re-apply began) and clears the markers;
one more apply restarts nothing and leaves no marker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kiln.inventory import require_valid
from kiln.sandbox import config

pytestmark = pytest.mark.integration

KILN = str(Path(sys.executable).parent / "kiln")
CTL = config.CONTROLLER
NODE = config.node_name(1)
RESTART = "/var/lib/kiln/slurm-restart-pending"
RECONFIGURE = "/var/lib/kiln/slurm-reconfigure-pending"
DAEMONS = {CTL: "slurmctld", NODE: "slurmd"}


def on(container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=check
    )


def exists(container: str, path: str) -> bool:
    return on(container, "test", "-e", path, check=False).returncode == 0


def started(container: str, unit: str) -> int:
    """When `unit` last became active, in seconds since the epoch (the containers share the
    host's clock)."""
    script = f'date -d "$(systemctl show -p ActiveEnterTimestamp --value {unit})" +%s'
    return int(on(container, "sh", "-c", script).stdout.strip())


def provision(inventory: Path, state: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KILN, "provision", str(inventory), "--stages", "slurm", "--yes", *extra],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "KILN_HOME": str(state)},
    )  # fmt: skip


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def kill_tree(pid: int) -> None:
    """SIGKILL every process group of `pid` and its descendants (ansible-runner starts
    ansible-playbook in a session of its own, so one killpg would miss it)."""
    tree, todo, seen = _children(), [pid], []
    while todo:
        current = todo.pop()
        seen.append(current)
        todo.extend(tree.get(current, []))
    groups = set()
    for process in seen:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(process))
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_a_run_killed_after_the_config_copy_restarts_on_reapply(provisioned_sandbox, tmp_path):
    state = provisioned_sandbox.state
    inventory = tmp_path / "inventory"
    shutil.copytree(provisioned_sandbox.inventory, inventory)
    memory = require_valid(inventory).compute[0].real_memory_mb
    settings_file = inventory / "group_vars" / "all.yml"
    settings = yaml.safe_load(settings_file.read_text())
    settings["kiln_real_memory_mb"] = memory - 1
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    wanted = f"RealMemory={memory - 1} "
    try:
        for container in DAEMONS:
            on(container, "rm", "-f", RESTART, RECONFIGURE)
        before = {c: started(c, unit) for c, unit in DAEMONS.items()}
        began = time.time()
        run = subprocess.Popen(
            [KILN, "provision", str(inventory), "--stages", "slurm", "--yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "KILN_HOME": str(state)},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 600
            while not all(
                wanted in on(c, "cat", "/etc/slurm/slurm.conf", check=False).stdout for c in DAEMONS
            ):
                assert run.poll() is None, f"kiln provision ended (rc {run.returncode}) first"
                assert time.monotonic() < deadline, "the new slurm.conf never arrived"
                time.sleep(0.1)
        finally:
            kill_tree(run.pid)
            run.wait(timeout=60)
        killed = time.time()
        assert run.returncode == -signal.SIGKILL

        # Killed in the window: the new file is in place, nothing restarted, the restart noted.
        for container, unit in DAEMONS.items():
            assert started(container, unit) == before[container], (container, "restarted early")
            assert started(container, unit) < began
            assert exists(container, RESTART), f"no pending restart on {container}"

        reapply_began = int(time.time())
        assert reapply_began >= int(killed)
        again = provision(inventory, state)
        assert again.returncode == 0, again.stderr[-3000:]
        for container, unit in DAEMONS.items():
            assert started(container, unit) >= reapply_began, (container, unit, "not restarted")
            assert not exists(container, RESTART), container
            assert not exists(container, RECONFIGURE), container
        show = on(CTL, "scontrol", "show", "node", NODE).stdout
        assert f"RealMemory={memory - 1} " in show, show

        # Converged: one more apply restarts nothing and leaves no marker behind.
        settled = {c: started(c, unit) for c, unit in DAEMONS.items()}
        third = provision(inventory, state)
        assert third.returncode == 0, third.stderr[-3000:]
        assert {c: started(c, unit) for c, unit in DAEMONS.items()} == settled
        for container in DAEMONS:
            assert not exists(container, RESTART), container
    finally:
        restore = provision(provisioned_sandbox.inventory, state)
        assert restore.returncode == 0, restore.stderr[-3000:]
