"""Bringing a burn-in home: results and HCA readings from the nodes into the run record.

    collect(nodes, paths, run_id, layout, progress)    # documents, lines, ib/, logs/ per node
    read_hcas(nodes, layout, "before", progress)       # {node: its /sys/class/infiniband dump}
    library_zip()                                      # (bytes, digest): what the nodes run

Over SSH (kiln.fleet), as root. A node that cannot be read is reported through `progress` and
left out: its missing results are failures when the run is judged, never a smaller run.
Each node sends its gemm and all-reduce documents as one compressed frame and their compact
lines, made there (kiln.burnin.node_results, shipped as `library_zip`); the controller
appends the frames to the run's documents file (kiln.records.documents) and then the lines to
its compact file (kiln.judging.compact), parsing nothing. A node without the library sends
its frame alone, and the controller makes its lines. Logs and InfiniBand reports are stored
as files.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import shlex
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path, PurePosixPath

from kiln.burnin.jobs import Paths
from kiln.burnin.node_results import EMPTY_PACKAGES, LIBRARY, result_lines
from kiln.fabric.links import sysfs_dump_command
from kiln.fleet import CommandOutcome, NodeResult
from kiln.fleet import run_as_root as fleet_run_as_root
from kiln.inventory import Node
from kiln.judging import compact
from kiln.records.burnin import RunLayout
from kiln.records.documents import Frame, append_frames, inflate

Progress = Callable[[str], None]
TIMEOUT = 120.0


def run_as_root(nodes: list[Node], command: str) -> list[NodeResult]:
    """`command` on every node as root (kiln.fleet.run_as_root); results in node order."""
    return fleet_run_as_root(nodes, command, timeout=TIMEOUT).results


@cache
def library_zip() -> tuple[bytes, str]:
    """The modules the nodes run at collection (node_results.LIBRARY) as one zip, and its
    digest, which names this kiln's version of them: the same bytes for the same sources
    (fixed dates), so installing it again changes nothing."""
    root = Path(__file__).resolve().parent.parent  # the kiln package
    members = {f"kiln/{rel}": (root / rel).read_bytes() for rel in LIBRARY}
    members.update({f"kiln/{rel}": b"" for rel in EMPTY_PACKAGES})
    digest = hashlib.sha256()
    for name in sorted(members):
        digest.update(name.encode() + b"\0" + members[name] + b"\0")
    tag = digest.hexdigest()[:16]
    members["DIGEST"] = tag.encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(members):
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), members[name])
    return out.getvalue(), tag


# On a node: what it holds of the run, in three parts the controller splits without parsing
# the bulk: a JSON line (the documents' names, whether their lines follow or why not, the
# other files: ib/ reports, logs), the documents (gemm/, allreduce/) as one zlib frame in
# base64 on one line, then their compact lines when this kiln's library is there (its DIGEST
# as the controller's). Then the run's files are removed.
_FETCH = """\
import base64,glob,json,os,sys,zlib
root,run,logs,lib,digest=sys.argv[1:6]
base=os.path.join(root,run)
docs,files,dropped={},{},[]
for b,dirs,names in os.walk(base):
 for n in names:
  if n.endswith('.tmp'): continue
  p=os.path.join(b,n)
  rel=os.path.relpath(p,base)
  text=open(p,errors='replace').read()
  k=rel.split('/')
  if len(k)==2 and k[0] in ('gemm','allreduce') and k[1].endswith('.json'):
   if any(c in rel for c in '\\t\\n\\r'): dropped.append(rel)
   else: docs[rel]=text
  else: files[rel]=text
for p in glob.glob(os.path.join(logs,run+'-*.log')):
 files['logs/'+os.path.basename(p)]=open(p,errors='replace').read()[-65536:]
lines,why=None,''
try:
 import zipfile
 if zipfile.ZipFile(lib).read('DIGEST').decode()!=digest: why='another kiln\\'s library'
 else:
  sys.path.insert(0,lib)
  from kiln.burnin.node_results import result_lines
  docs,lines=result_lines(docs)
except Exception as e: why=type(e).__name__+': '+str(e)
head={'names':list(docs),'lines':lines is not None,'why':why,'files':files,'dropped':dropped}
out=sys.stdout
out.write(json.dumps(head)+'\\n')
out.write(base64.b64encode(zlib.compress(json.dumps(docs).encode(),6)).decode()+'\\n')
out.write(lines or '')
"""


def fetch_command(paths: Paths, run_id: str, digest: str) -> str:
    """On a node: print this run's results and logs in the three parts above (`digest`: of
    this kiln's library, library_zip), then remove them."""
    run_dir = paths.run_dir(run_id)
    logs = f"{paths.results}/logs"
    args = (paths.results, run_id, logs, paths.library, digest)
    return (
        f"python3 -c {shlex.quote(_FETCH)} {' '.join(map(shlex.quote, args))} "
        f"&& rm -rf {shlex.quote(run_dir)} {shlex.quote(logs)}/{run_id}-*.log"
    )


def collect(
    nodes: list[Node], paths: Paths, run_id: str, layout: RunLayout, progress: Progress
) -> None:
    """Fetch every node's results of this run into the run record (and remove them there)."""
    _zip, digest = library_zip()
    sent = []
    for res in run_as_root(nodes, fetch_command(paths, run_id, digest)):
        if res.status is not CommandOutcome.OK:
            progress(f"{res.name}: results not fetched ({res.status}: {res.error})")
            continue
        sent.append((res.name, res.stdout))
    store_fetched(layout, sent, progress)


def store_fetched(layout: RunLayout, sent: list[tuple[str, str]], progress: Progress) -> None:
    """What the nodes printed (node, stdout) into the record: their documents, then their
    lines (a line is never written before its document), then their other files."""
    frames, lines, parsed_here = [], [], {}
    for node, stdout in sent:
        try:
            head_text, frame_text, made = stdout.split("\n", 2)
            head = json.loads(head_text)
            frame = Frame(node, tuple(head["names"]), base64.b64decode(frame_text))
            files, made_there = dict(head["files"]), head["lines"] is True
        except (ValueError, KeyError, TypeError, binascii.Error):
            progress(f"{node}: unreadable results listing")
            continue
        for name in head.get("dropped") or ():
            progress(f"{node}: {name!r} not kept (a tab or newline in its name)")
        if made_there and made.count("\n") != len(frame.names):  # cut short on the way
            made_there, head["why"] = False, "its lines were cut short"
        if not made_there:  # no library there: its lines are made here
            parsed_here.setdefault(str(head.get("why") or "no reason given"), []).append(node)
            documents, made = result_lines(inflate(frame.data))
            frame = Frame.of(node, documents)
        frames.append(frame)
        lines.append(made)
        for rel, text in files.items():
            store(layout, node, rel, text)
    for why, names in parsed_here.items():
        progress(f"{len(names)} node(s) sent no result lines ({why}, e.g. {names[0]}): made here")
    if frames:  # the documents first, then their lines and the documents file's size
        size = append_frames(layout.root, frames)
        append_compact(layout, compact.collected(size, "".join(lines)))


def append_compact(layout: RunLayout, lines: str) -> None:
    """Add result lines to the run's compact file (its header first when it is new; a file
    of another format is renamed results.compact.old and a new one begun)."""
    if not lines:
        return
    path = layout.root / compact.FILENAME
    try:  # a file an older kiln began: set aside (its results are in their own files)
        with path.open(encoding="utf-8") as old:
            if old.read(len(compact.HEADER)) != compact.HEADER:
                path.replace(path.with_name(compact.FILENAME + ".old"))
    except FileNotFoundError:
        pass
    with path.open("a", encoding="utf-8") as out:
        if out.tell() == 0:
            out.write(compact.HEADER)
        out.write(lines)


def store(layout: RunLayout, node: str, rel: str, text: str) -> None:
    """One fetched file that is not a result document into the record (an InfiniBand report,
    a log); names outside the layout are dropped."""
    parts = PurePosixPath(rel).parts
    if len(parts) != 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return
    kind, name = parts
    if kind == "ib" and name.endswith(".txt"):
        target = layout.root / "ib" / name  # <pair>-rail<k>.txt, from the client
    elif kind == "logs":
        target = layout.root / "logs" / node / name
    else:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


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
