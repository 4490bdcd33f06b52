"""Bringing a burn-in home: results and HCA readings from the nodes into the run record.

    collect(nodes, paths, run_id, layout, progress)    # gemm/, allreduce/, ib/, logs/ per node
    read_hcas(nodes, layout, "before", progress)       # {node: its /sys/class/infiniband dump}

Over SSH (kiln.fleet), as root. A node that cannot be read is reported through `progress` and
left out: its missing results are failures when the run is judged, never a smaller run.
Each gemm and all-reduce result is stored as its own file and also appended, as one line, to
the run's compact result file (kiln.judging.compact), which judging reads in one go.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import PurePosixPath

from kiln.burnin.jobs import Paths
from kiln.burnin.nccl_tests import complete_text
from kiln.fabric.links import sysfs_dump_command
from kiln.fleet import CommandOutcome, NodeResult
from kiln.fleet import run_as_root as fleet_run_as_root
from kiln.inventory import Node
from kiln.judging import compact
from kiln.records.burnin import RunLayout

Progress = Callable[[str], None]
TIMEOUT = 120.0


def run_as_root(nodes: list[Node], command: str) -> list[NodeResult]:
    """`command` on every node as root (kiln.fleet.run_as_root); results in node order."""
    return fleet_run_as_root(nodes, command, timeout=TIMEOUT).results


def fetch_command(paths: Paths, run_id: str) -> str:
    """On a node: print this run's results and logs as one JSON object, then remove them."""
    program = (
        "import json,os,sys,glob\n"
        "root,run,logs=sys.argv[1],sys.argv[2],sys.argv[3]\n"
        "files={}\n"
        "for base,dirs,names in os.walk(os.path.join(root,run)):\n"
        " for n in names:\n"
        "  if n.endswith('.tmp'): continue\n"
        "  p=os.path.join(base,n)\n"
        "  files[os.path.relpath(p,os.path.join(root,run))]=open(p,errors='replace').read()\n"
        "for p in glob.glob(os.path.join(logs,run+'-*.log')):\n"
        " files['logs/'+os.path.basename(p)]=open(p,errors='replace').read()[-65536:]\n"
        "json.dump(files,sys.stdout)\n"
    )
    run_dir = paths.run_dir(run_id)
    logs = f"{paths.results}/logs"
    return (
        f"python3 -c {shlex.quote(program)} {shlex.quote(paths.results)} {shlex.quote(run_id)} "
        f"{shlex.quote(logs)} && rm -rf {shlex.quote(run_dir)} {shlex.quote(logs)}/{run_id}-*.log"
    )


def collect(
    nodes: list[Node], paths: Paths, run_id: str, layout: RunLayout, progress: Progress
) -> None:
    """Fetch every node's results of this run into the run record (and remove them there)."""
    lines: list[str] = []
    for res in run_as_root(nodes, fetch_command(paths, run_id)):
        if res.status is not CommandOutcome.OK:
            progress(f"{res.name}: results not fetched ({res.status}: {res.error})")
            continue
        try:
            files = json.loads(res.stdout)
        except ValueError:
            progress(f"{res.name}: unreadable results listing")
            continue
        for rel, text in files.items():
            lines.append(store(layout, res.name, rel, text))
    append_compact(layout, lines)


def append_compact(layout: RunLayout, lines: list[str]) -> None:
    """Add result lines to the run's compact file (its header first when it is new; a file
    of another format is renamed results.compact.old and a new one begun)."""
    text = compact.pack(lines)  # the A and G lines as blocks of columns
    if not text:
        return
    path = layout.root / compact.FILENAME
    try:  # a file an older kiln began: set aside (its results are in their own files too)
        with path.open(encoding="utf-8") as old:
            if old.read(len(compact.HEADER)) != compact.HEADER:
                path.replace(path.with_name(compact.FILENAME + ".old"))
    except FileNotFoundError:
        pass
    with path.open("a", encoding="utf-8") as out:
        if out.tell() == 0:
            out.write(compact.HEADER)
        out.write(text)


def store(layout: RunLayout, node: str, rel: str, text: str) -> str:
    """One fetched file into the record; names outside the layout are dropped. Returns the
    result's line for the compact file ("" for logs, InfiniBand reports, dropped names)."""
    parts = PurePosixPath(rel).parts
    if len(parts) != 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return ""
    kind, name = parts
    line = ""
    if kind == "gemm" and name.endswith(".json"):
        target = layout.gemm(name[: -len(".json")])
        line = compact.encode("gemm", target.stem, text)
    elif kind == "allreduce" and name.endswith(".json"):
        target = layout.allreduce(name[: -len(".json")])
        text = complete_text(text)  # nccl-tests' output parsed here: kiln.burnin.nccl_tests
        line = compact.encode("allreduce", target.stem, text)
    elif kind == "ib" and name.endswith(".txt"):
        target = layout.root / "ib" / name  # <pair>-rail<k>.txt, from the client
    elif kind == "logs":
        target = layout.root / "logs" / node / name
    else:
        return ""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return line


def read_hcas(
    nodes: list[Node], layout: RunLayout, phase: str, progress: Progress
) -> dict[str, str]:
    """/sys/class/infiniband of every node into the run record ("before"/"after" the jobs)."""
    dumps = {}
    for res in run_as_root(nodes, sysfs_dump_command()):
        if res.status is not CommandOutcome.OK:
            progress(f"{res.name}: HCAs not read {phase} ({res.status}: {res.error})")
            continue
        path = layout.ib_sysfs(res.name, phase)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(res.stdout, encoding="utf-8")
        dumps[res.name] = res.stdout
    return dumps
