"""A burn-in's results brought home the way kiln.burnin.collect brings them, without SSH: the
documents laid out as a node's jobs leave them, kiln's own fetch program run on them here
(python3, as on a node; with kiln's library zip in place or not), and what it printed stored
by store_fetched. Tests build run records with it, so they read what a real collection
writes."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from kiln.burnin.collect import fetch_command, library_zip, store_fetched
from kiln.burnin.jobs import Paths
from kiln.records.burnin import RunLayout


def fetch_here(documents: dict[str, str], work: Path, *, library: bool | bytes = True) -> str:
    """What the fetch program prints for `documents` ({"gemm/<node>.json": text, ...});
    `library`: kiln's zip in place (True), none (False), or these bytes."""
    work.mkdir(parents=True, exist_ok=True)
    node = Path(tempfile.mkdtemp(dir=work))
    paths = Paths(prefix=str(node / "prefix"), results=str(node / "results"))
    for rel, text in documents.items():
        path = Path(paths.run_dir("r1")) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    data, digest = library_zip()
    if library is not False:
        Path(paths.library).parent.mkdir(parents=True, exist_ok=True)
        Path(paths.library).write_bytes(data if library is True else library)
    done = subprocess.run(
        ["sh", "-c", fetch_command(paths, "r1", digest)], capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    assert not Path(paths.run_dir("r1")).exists(), "the fetch removes what it sent"
    return done.stdout


def collect_here(
    run: Path, documents: dict[str, str], *, library: bool | bytes = True, node: str = "n1"
) -> list[str]:
    """Store `documents` into the run record `run` as a collection from `node` would; returns
    what collect said on the way."""
    said: list[str] = []
    stdout = fetch_here(documents, run.parent / "nodes", library=library)
    store_fetched(RunLayout(run), [(node, stdout)], said.append)
    return said


def node_answer(files: dict[str, str], *, library: bool | bytes = True) -> str:
    """What a node prints to kiln's fetch when its run holds `files` ({"gemm/<node>.json":
    text, "ib/<pair>-rail0.txt": ..., "logs/<job>.log": ...}): the real program's output, for
    test doubles of the SSH fan-out."""
    with tempfile.TemporaryDirectory(prefix="kiln-node-") as work:
        return fetch_here(files, Path(work), library=library)
