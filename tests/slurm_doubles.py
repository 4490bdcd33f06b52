"""Stand-ins for the controller's Slurm and a node's dpkg, for role tests over local hosts.

`scontrol` keeps each node's state and reason in STATE/<name> (JSON) and answers the way Slurm
22.05 does: `scontrol show node` replays the recorded real block of
tests/fixtures/real/slurm-sinfo-scontrol (its name, State= and Reason= lines set per node),
"Node X not found" on stdout with exit 1 for a name Slurm does not know, and Slurm's error texts
on stderr with exit 1 when the controller cannot be reached (STATE/down). `squeue` answers that
no job runs. `dpkg-query`, `dpkg` (--get-selections, --set-selections) and `fake-apt-install`
keep each host's packages in STATE/dpkg-<host>.json ({name: {version, selection}}); the last
refuses to change a held package with apt's words, as apt does without
--allow-change-held-packages. Every call is appended to STATE/calls.log as a JSON list (the
host first for the package tools), so a test reads what happened, and in which order.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from captures import shared_capture

ROOT = Path(__file__).resolve().parents[1]
SCONTROL_SHOW = shared_capture(
    "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
)
# Slurm's own words (src/scontrol, src/common/slurm_errno.c)
UNREACHABLE = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
TIMED_OUT = "slurm_load_node error: Socket timed out on send/recv operation"
# apt's words for a held package it was asked to change (apt-pkg/algorithms.cc via apt-get)
APT_HELD = "E: Held packages were changed and -y was used without --allow-change-held-packages."

SCONTROL = r"""#!PYTHON
import json, os, pathlib, sys

state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
args = sys.argv[1:]
with open(state / "calls.log", "a") as log:
    log.write(json.dumps(args) + "\n")
down = (state / "down").exists()
if args == ["ping"]:
    print("Slurmctld(primary) at ctl is " + ("DOWN" if down else "UP"))
    if down:
        print("*****************************************")
        print("** RESTORE SLURMCTLD DAEMON TO SERVICE **")
        print("*****************************************")
    sys.exit(1 if down else 0)
if down:
    what = "slurm_load_node" if args[0] == "show" else "slurm_update"
    sys.stderr.write(what + " error: Unable to contact slurm controller (connect failure)\n")
    sys.exit(1)
if args[:2] == ["show", "node"]:
    path = state / args[2]
    if not path.exists():
        print("Node %s not found" % args[2])
        sys.exit(1)
    node = json.loads(path.read_text())
    if node.get("error"):
        sys.stderr.write(node["error"] + "\n")
        sys.exit(1)
    block = (state / "template").read_text()
    block = block.replace("NodeName=cricket ", "NodeName=%s " % args[2])
    block = block.replace("State=IDLE ", "State=%s " % node["state"])
    if node.get("reason"):
        block += "   Reason=%s [root@2026-11-30T10:00:00]\n" % node["reason"]
    sys.stdout.write(block)
    sys.exit(0)
if args[0] == "update":
    fields = dict(arg.split("=", 1) for arg in args[1:])
    names = fields["nodename"].split(",")  # a list of names, as kiln's batched updates send
    refused = (state / "refuse").read_text().split() if (state / "refuse").exists() else []
    if any(name in refused or not (state / name).exists() for name in names):
        sys.stderr.write("slurm_update error: Invalid node name specified\n")
        sys.exit(1)
    for name in names:
        path = state / name
        node = json.loads(path.read_text())
        if fields["state"] == "drain":
            node.update(state="IDLE+DRAIN", reason=fields["reason"])
        elif fields["state"] == "resume":
            node.update(state="IDLE", reason="")
        path.write_text(json.dumps(node))
    sys.exit(0)
sys.exit(2)
"""

# dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' NAME..., dpkg, and apt's part.
PACKAGES = r"""#!PYTHON
import json, os, pathlib, sys

state = pathlib.Path(os.environ["KILN_FAKE_SLURM"])
host = os.environ.get("KILN_FAKE_HOST", "node")
tool, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.log", "a") as log:
    log.write(json.dumps([host, tool] + args) + "\n")
db_path = state / ("dpkg-%s.json" % host)
db = json.loads(db_path.read_text()) if db_path.exists() else {}
if tool == "dpkg-query":
    missing = 0
    for name in [a for a in args if not a.startswith("-")]:
        if name in db:
            flag = "hi" if db[name]["selection"] == "hold" else "ii"
            print("%s %s %s " % (name, db[name]["version"], flag))
        else:
            sys.stderr.write("dpkg-query: no packages found matching %s\n" % name)
            missing = 1
    sys.exit(missing)
if tool == "dpkg" and args[0] == "--get-selections":
    if args[1] in db:
        print("%s\t\t\t\t\t%s" % (args[1], db[args[1]]["selection"]))
    else:
        sys.stderr.write("dpkg: no packages found matching %s\n" % args[1])
    sys.exit(0)
if tool == "dpkg" and args[0] == "--set-selections":
    for line in sys.stdin.read().splitlines():
        name, selection = line.split()
        db[name]["selection"] = selection
    db_path.write_text(json.dumps(db))
    sys.exit(0)
if tool == "fake-apt-install":
    wanted = dict(arg.split("=", 1) for arg in args)
    held = [n for n, v in wanted.items() if n in db and db[n]["selection"] == "hold"
            and db[n]["version"] != v]
    if held:
        print("The following held packages will be changed:\n  " + " ".join(held))
        sys.stderr.write("APT_HELD\n")
        sys.exit(100)
    for name, version in wanted.items():
        db.setdefault(name, {"selection": "install"})["version"] = version
    db_path.write_text(json.dumps(db))
    sys.exit(0)
sys.exit(2)
"""


def install_doubles(state: Path, bin_dir: Path, nodes: dict[str, dict | None]) -> None:
    """Slurm's node states (None: not in Slurm) under `state`, the stand-ins in `bin_dir`."""
    state.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    blocks = SCONTROL_SHOW.read_text().split("\n\n")
    (state / "template").write_text(next(b for b in blocks if b.startswith("NodeName=cricket ")))
    for name, node in nodes.items():
        if node is not None:
            (state / name).write_text(json.dumps(node))
    tools = {
        "scontrol": SCONTROL.replace("PYTHON", sys.executable, 1),
        "squeue": "#!/bin/sh\nexit 0\n",  # no job runs on any node
    }
    packages = PACKAGES.replace("PYTHON", sys.executable, 1).replace("APT_HELD", APT_HELD)
    tools |= dict.fromkeys(("dpkg-query", "dpkg", "fake-apt-install"), packages)
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.log").read_text().splitlines()]


def updates(state: Path) -> list[list[str]]:
    """The `scontrol update` calls, in order."""
    return [args for args in calls(state) if args[0] == "update"]


def node(state: Path, name: str) -> dict:
    return json.loads((state / name).read_text())


def packages(state: Path, host: str) -> dict:
    path = state / f"dpkg-{host}.json"
    return json.loads(path.read_text()) if path.exists() else {}


class Drains:
    """The controller's drains as kiln.slurmctl.cas's two programs change them, for campaign
    tests: node -> its reason (None: in service). `shell` answers Controller.shell: the window
    lifts a node that holds the reason given and puts it back (a node holding any other reason
    is kept), the compare-and-set applies a change only where the node holds what is expected.
    `during_window(node)` -> a reason someone places while that node is lifted. Every program
    is logged as (kind, [nodes], job ids)."""

    def __init__(self, reasons: dict[str, str | None], during_window=None) -> None:
        self.reasons = dict(reasons)
        self.during_window = during_window or {}
        self.programs: list[tuple[str, list[str], list[str]]] = []

    def show(self, names):
        """Controller.show: the nodes as `scontrol show node` would read, from `reasons`."""
        from kiln.slurmctl.state import NodeState

        return {
            n: NodeState(n, "idle+drain", r) if r else NodeState(n, "idle")
            for n, r in ((n, self.reasons.get(n)) for n in names)
        }

    @staticmethod
    def _args(text: str, name: str) -> list[str]:
        import shlex

        if "setsid --wait " in text:  # the window: one command line between two others
            text = text[text.index("setsid --wait ") : text.index("\nwait $!")]
        tokens = shlex.split(text)
        args = tokens[tokens.index(name) + 1 :]
        return args[:-4] if args[-1:] == ["&"] else args  # the window's redirections

    def shell(self, text: str, what: str, *, timeout: float | None = None) -> str:
        from kiln.slurmctl.cas import MARK

        lines = []
        if "kiln-window" in text:
            _wait, jobs, *pairs = self._args(text, "kiln-window")
            nodes = pairs[0::2]
            self.programs.append(("window", nodes, jobs.split(",")))
            for node, reason in zip(nodes, pairs[1::2], strict=True):
                if self.reasons.get(node) != reason:
                    lines.append(f"{MARK} {node} kept drained|{self.reasons.get(node)}")
                elif node in self.during_window:
                    self.reasons[node] = self.during_window[node]
                    lines.append(f"{MARK} {node} kept draining|{self.reasons[node]}")
                else:
                    lines.append(f"{MARK} {node} restored")
            return "\n".join(lines) + "\n"
        args = self._args(text, "kiln-cas")
        triples = list(zip(args[0::3], args[1::3], args[2::3], strict=True))
        self.programs.append(("cas", [t[0] for t in triples], []))
        for node, expected, target in triples:
            now = self.reasons.get(node)
            if (expected == "-" and now is None) or (now is not None and expected == "=" + now):
                self.reasons[node] = None if target == "-" else target[1:]
                lines.append(f"{MARK} {node} applied")
            else:
                lines.append(f"{MARK} {node} kept drained|{now}")
        return "\n".join(lines) + "\n"


def local_inventory(nodes: dict, controllers: dict, **variables: object) -> dict:
    """An inventory of local hosts (kiln's python): `nodes` in kiln_compute, `controllers` in
    kiln_controllers, `variables` for all of them."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": {**local, **variables},
            "children": {
                "kiln_controllers": {"hosts": controllers},
                "kiln_compute": {"hosts": dict.fromkeys(nodes)},
            },
        }
    }


def role_playbook(
    tmp_path: Path, inventory: dict, play: object, *, state: Path, bin_dir: Path, run_id: str
) -> tuple[list[str], dict]:
    """ansible-playbook's argv and environment for a play of kiln's roles over local hosts:
    the inventory and play written as JSON into tmp_path, the stand-ins first on PATH, kiln's
    roles and filters found as the engine finds them."""
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(json.dumps(play))
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
        "-f", "10", "-e", f"kiln_run_id={run_id}",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT / "cli"),
        "KILN_FAKE_SLURM": str(state),
        "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(ROOT / "playbooks" / "filter_plugins"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    return argv, env
