"""Ordering in the Slurm roles, through real ansible-playbook over the local host.

slurm_common records the pending restart or reconfigure BEFORE it copies the new files (a run
that dies at the copy leaves the marker, so the next apply restarts), and records nothing on a
converged node. slurm_node's quarantine drains a new node on the controller BEFORE slurmd is
installed or started, fails closed (marker unwritten, slurmd never reached) with Slurm's words
when the drain is refused, and leaves a known node alone. The controller's `scontrol` is a
stand-in on PATH that logs its argv and answers with Slurm 22.05's error text when "down".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.parsers.drain_reason import parse_reason

pytestmark = pytest.mark.local

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
UNREACHABLE = "slurm_update error: Unable to contact slurm controller (connect failure)"
FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")

SCONTROL = r"""#!PYTHON
import json, os, pathlib, sys
state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
with open(state / "calls.log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if (state / "down").exists():
    sys.stderr.write("UNREACHABLE\n")
    sys.exit(1)
"""


def play(tmp_path: Path, body: str, *extra: str) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n"
        "  gather_subset: [min, hardware]\n  tasks:\n" + body
    )
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "ANSIBLE_FORCE_COLOR": "0",
        "KILN_FAKE_SLURM": str(tmp_path),
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(book),
         "-e", f"ansible_python_interpreter={sys.executable}", *extra],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip


# --- slurm_common: the marker before the copy ------------------------------------------------

COMMON = """\
    - name: The configuration tasks of slurm_common
      ansible.builtin.import_role:
        name: slurm_common
"""


def common(tmp_path: Path) -> subprocess.CompletedProcess:
    return play(
        tmp_path, COMMON, "--start-at-task", "Read the slurm.conf in place",
        "-e", f"slurm_common_rendered_dir={tmp_path / 'rendered'}",
        "-e", f"slurm_common_config_dir={tmp_path / 'etc'}",
        "-e", f"__slurm_common_restart_marker={tmp_path / 'restart'}",
        "-e", f"__slurm_common_reconfigure_marker={tmp_path / 'reconfigure'}",
    )  # fmt: skip


def render(tmp_path: Path, slurm_conf: str) -> None:
    (tmp_path / "rendered").mkdir(exist_ok=True)
    (tmp_path / "etc").mkdir(exist_ok=True)
    for name in FILES:
        (tmp_path / "rendered" / name).write_text(f"# {name}\n")
    (tmp_path / "rendered" / "slurm.conf").write_text(slurm_conf)


NODES = "ClusterName=t\nNodeName=n[1-2] CPUs=1 RealMemory=1000 State=UNKNOWN\n"


def test_the_marker_is_written_before_the_copy_and_not_on_a_converged_node(tmp_path):
    render(tmp_path, NODES)
    first = common(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    assert (tmp_path / "restart").is_file()  # no slurm.conf before: restart
    (tmp_path / "restart").unlink()  # what slurmctld/slurmd's role does once restarted

    converged = common(tmp_path)
    assert converged.returncode == 0, converged.stdout[-3000:]
    assert not (tmp_path / "restart").exists() and not (tmp_path / "reconfigure").exists()
    assert "changed=0" in converged.stdout

    # A partition change needs a reconfigure only.
    render(tmp_path, NODES + "PartitionName=batch Nodes=n[1-2] Default=YES State=UP\n")
    assert common(tmp_path).returncode == 0
    assert (tmp_path / "reconfigure").is_file() and not (tmp_path / "restart").exists()
    (tmp_path / "reconfigure").unlink()


def test_a_run_that_dies_at_the_copy_leaves_the_restart_pending(tmp_path):
    render(tmp_path, NODES)
    assert common(tmp_path).returncode == 0
    (tmp_path / "restart").unlink()
    render(tmp_path, NODES.replace("RealMemory=1000", "RealMemory=999"))
    (tmp_path / "etc" / "gres.conf").unlink()
    (tmp_path / "etc" / "gres.conf").mkdir()  # the copy of this file fails
    (tmp_path / "etc" / "gres.conf" / "keep").write_text("")
    died = common(tmp_path)
    assert died.returncode != 0
    assert "Install the generated configuration" in died.stdout
    assert (tmp_path / "restart").is_file()  # already on disk when the copy failed


# --- slurm_node: the quarantine drain before slurmd ------------------------------------------

QUARANTINE = """\
    - name: The quarantine of slurm_node
      ansible.builtin.include_role:
        name: slurm_node
        tasks_from: quarantine
"""


def quarantine(tmp_path: Path) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        SCONTROL.replace("#!PYTHON", f"#!{sys.executable}").replace("UNREACHABLE", UNREACHABLE)
    )
    scontrol.chmod(0o755)
    return play(
        tmp_path, QUARANTINE,
        "-e", "slurm_node_controller=localhost",
        "-e", f"__slurm_node_joined_marker={tmp_path / 'joined'}",
    )  # fmt: skip


def calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_new_node_is_drained_then_remembered_and_a_known_node_left_alone(tmp_path):
    new = quarantine(tmp_path)
    assert new.returncode == 0, new.stdout[-3000:]
    [call] = calls(tmp_path)
    assert call[:4] == ["update", "nodename=localhost", "state=drain", call[3]]
    reason = parse_reason(call[3].removeprefix("reason="))
    assert reason is not None and reason.kind == "quarantine", call
    assert reason.why.startswith("new node")
    assert (tmp_path / "joined").read_text().startswith("cpus=")

    known = quarantine(tmp_path)
    assert known.returncode == 0, known.stdout[-3000:]
    assert len(calls(tmp_path)) == 1  # no second drain of a known node
    assert "changed=0" in known.stdout


def test_a_refused_drain_fails_the_node_and_remembers_nothing(tmp_path):
    (tmp_path / "down").write_text("")
    refused = quarantine(tmp_path)
    assert refused.returncode != 0
    assert "slurmd is not started" in refused.stdout
    assert UNREACHABLE in refused.stdout
    assert not (tmp_path / "joined").exists()  # the next apply drains again
