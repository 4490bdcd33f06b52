"""Restart markers are written BEFORE the configuration they guard, by tasks, never handlers.

A handler runs after the change: a run killed between the change and the handler loses the
restart, and the next apply finds the files converged and restarts nothing, leaving slurmdbd or
MariaDB on the old settings. The roles therefore probe the template in check mode, write the
marker when it would change, then write the file; the restart reads the marker and clears it
after (the munge and slurm_common roles do the same). This reads the roles' task lists in order
(the real run of that ordering over a killed play is tests/unit/test_slurm_roles_order.py's,
for slurm_common; slurm_dbd needs MariaDB, so its molecule scenario runs it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
TASKS = ROLES / "slurm_dbd" / "tasks" / "enabled.yml"


def _tasks(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or []


def _index(tasks: list[dict], test) -> int:
    found = [i for i, task in enumerate(tasks) if test(task)]
    assert len(found) == 1, [tasks[i].get("name") for i in found]
    return found[0]


def _module(task: dict) -> tuple[str, dict]:
    for key, value in task.items():
        if key.startswith("ansible.builtin."):
            return key.removeprefix("ansible.builtin."), value if isinstance(value, dict) else {}
    return "", {}


@pytest.mark.parametrize(
    ("src", "marker", "service"),
    [
        ("mariadb-slurmdbd.cnf.j2", "__slurm_dbd_mariadb_restart_marker",
         "__slurm_dbd_mariadb_service"),
        ("slurmdbd.conf.j2", "__slurm_dbd_restart_marker", "slurmdbd"),
    ],
)  # fmt: skip
def test_the_marker_is_written_before_the_config_and_cleared_after_the_restart(
    src, marker, service
):
    tasks = _tasks(TASKS)

    def template(task, probe):
        kind, args = _module(task)
        return kind == "template" and args.get("src") == src and task.get("check_mode") is probe

    probe = _index(tasks, lambda t: template(t, True))
    write = _index(tasks, lambda t: template(t, None))
    mark = _index(tasks, lambda t: _module(t)[0] == "copy" and marker in _module(t)[1]["dest"])
    restart = _index(
        tasks,
        lambda t: (
            _module(t)[0] == "systemd_service"
            and _module(t)[1].get("state") == "restarted"
            and service in _module(t)[1]["name"]
        ),
    )
    clear = _index(
        tasks,
        lambda t: (
            _module(t)[0] == "file"
            and _module(t)[1].get("state") == "absent"
            and marker in _module(t)[1]["path"]
        ),
    )
    assert probe < mark < write < restart < clear
    registered = tasks[probe]["register"]
    assert tasks[mark]["when"] == f"{registered} is changed"  # a converged host marks nothing
    assert "notify" not in tasks[write]  # nothing left for a handler to lose


def test_no_handler_writes_a_restart_marker():
    for handlers in ROLES.glob("*/handlers/main.yml"):
        for task in _tasks(handlers):
            kind, args = _module(task)
            assert not (kind == "copy" and "marker" in str(args.get("dest", ""))), (
                f"{handlers}: {task['name']} writes a restart marker after the change"
            )
