"""A run's workload documents, packed: one compressed frame per node and collection.

    append_frames(run_dir, frames)     # collect: [Frame(node, names, zlib of {name: text})]
    docs = RunDocuments(run_dir)       # read
    docs.text("gemm/node01.json")      # the document as the workload printed it, or None
    docs.names("allreduce")            # the all-reduce jobs that have a document
    docs.read_all()                    # {name: text} of every document (load_run)

`<run>/documents.kz`, appended to by every collection (kiln.burnin.collect):

    #kiln-documents 1\n
    F<TAB>node<TAB>length<TAB>name<TAB>name ...\n   then `length` bytes: zlib of the JSON
                                                    object {name: text, ...}, then \n

Names are paths in the record ("gemm/<node>.json", "allreduce/<job>.json"); a later frame
replaces an earlier one's document of the same name (a second collection). At 12,500 nodes
one file of about one frame per node costs the controller one write per collection, where a
file per result cost 112,500 (about 10 s on a server's disk); the node compressed its frame,
so the controller neither parses nor inflates the documents to keep them. Records written by
an older kiln kept each document as its own file (<run>/gemm/<node>.json, ...): `text` reads
that file first, so both kinds of record read alike. Reading and writing files is all this
module does.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

FILENAME = "documents.kz"
HEADER = b"#kiln-documents 1\n"


@dataclass(frozen=True, slots=True)
class Frame:
    node: str
    names: tuple[str, ...]
    data: bytes  # zlib of the JSON object {name: text}

    @classmethod
    def of(cls, node: str, documents: dict[str, str]) -> Frame:
        """A frame made here (the controller's, for a node whose lines it made: its
        all-reduce documents completed there)."""
        return cls(node, tuple(documents), zlib.compress(json.dumps(documents).encode(), 1))


def inflate(data: bytes) -> dict[str, str]:
    """A frame's documents, {name: text}; {} when its data is damaged."""
    try:
        documents = json.loads(zlib.decompress(data))
    except (zlib.error, ValueError):
        return {}
    return {str(k): str(v) for k, v in documents.items()} if isinstance(documents, dict) else {}


def append_frames(run_dir: Path | str, frames: list[Frame]) -> int:
    """Add frames to the run's documents file in one write (the header first when it is new);
    returns the file's size after them. A tail an earlier write left cut short is cut off
    first, so the new frames can be read. A frame whose node or names a header cannot hold is
    a ValueError, before anything is written."""
    for frame in frames:  # one look per frame, not per name
        joined = "\0".join((frame.node, *frame.names))
        if "\t" in joined or "\n" in joined or "\r" in joined or "" in (frame.node, *frame.names):
            raise ValueError(f"{frame.node!r}: a name with a tab or newline in it, or none")
    parts = []
    for frame in frames:
        head = "\t".join(("F", frame.node, str(len(frame.data)), *frame.names))
        parts += [head.encode(), b"\n", frame.data, b"\n"]
    path = Path(run_dir) / FILENAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+b") as f:
        old = f.read()
        if not old.startswith(HEADER):  # new (or not kiln's: begun again)
            f.seek(0)
            f.truncate()
            f.write(HEADER)
        else:
            end = len(HEADER) + _scan(old[len(HEADER) :], 0, {})
            if end < len(old):
                f.truncate(end)
            f.seek(end)
        f.write(b"".join(parts))
        return f.tell()


def _scan(data: bytes, base: int, where: dict[str, tuple[int, int]]) -> int:
    """Index the whole frames at the start of `data` (found at `base` in the file) into
    `where`; returns where the last whole frame ends in `data`."""
    pos, end = 0, len(data)
    while pos < end:
        stop = data.find(b"\n", pos)
        if stop < 0:
            break  # a header cut short: what follows was never finished
        head = data[pos:stop].decode(errors="replace").split("\t")
        try:
            length = int(head[2])
        except (IndexError, ValueError):
            break  # not a frame's header
        start, after = stop + 1, stop + 1 + length
        if head[0] != "F" or data[after : after + 1] != b"\n":
            break  # a frame cut short
        for name in head[3:]:
            where[name] = (base + start, length)
        pos = after + 1
    return pos


class RunDocuments:
    """The documents of one run record: its documents file, and (first) any document kept as
    its own file. The file's index is read when first asked and read on from where it ended
    when a name is not found (the campaign reads each pairwise round's results as it goes)."""

    def __init__(self, run_dir: Path | str) -> None:
        self.root = Path(run_dir)
        self._where: dict[str, tuple[int, int]] = {}  # name -> (offset, length) of its frame
        self._read_to = 0
        self._frame: tuple[int, dict[str, str]] | None = None  # the last frame inflated

    def size(self) -> int | None:
        """The documents file's size in bytes (None: the record has none)."""
        try:
            return (self.root / FILENAME).stat().st_size
        except FileNotFoundError:
            return None

    def text(self, name: str) -> str | None:
        """The document `name` ("gemm/<node>.json", ...), None when the record has none. A
        damaged frame (a collection cut short) reads as no document."""
        try:
            return (self.root / name).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            pass
        if name not in self._where:
            self._index()
        where = self._where.get(name)
        if where is None:
            return None
        if self._frame is None or self._frame[0] != where[0]:
            self._frame = (where[0], self._inflate(*where))
        return self._frame[1].get(name)

    def read_all(self) -> dict[str, str]:
        """Every document of the record, by name (each frame inflated once; a document kept as
        its own file wins, as in `text`)."""
        self._index()
        found: dict[str, str] = {}
        inflated: dict[int, dict[str, str]] = {}
        for name, (offset, length) in self._where.items():
            if offset not in inflated:
                inflated[offset] = self._inflate(offset, length)
            if name in inflated[offset]:
                found[name] = inflated[offset][name]
        for kind in ("gemm", "allreduce"):
            for stem in self.files(kind):
                try:
                    found[f"{kind}/{stem}.json"] = (self.root / kind / f"{stem}.json").read_text(
                        "utf-8"
                    )
                except OSError:
                    continue
        return found

    def names(self, kind: str) -> set[str]:
        """The stems of the documents of a kind ("gemm", "allreduce"): files and frames."""
        self._index()
        prefix = f"{kind}/"
        packed = {n[len(prefix) : -5] for n in self._where if n.startswith(prefix)}
        return packed | set(self.files(kind))

    def files(self, kind: str) -> list[str]:
        """The stems of the documents of a kind kept as their own files (an older kiln's
        record, or one written by hand), as glob lists them: not hidden ones."""
        try:
            own = os.listdir(self.root / kind)
        except OSError:
            return []
        return [n[:-5] for n in own if n.endswith(".json") and not n.startswith(".")]

    def _index(self) -> None:
        try:
            with (self.root / FILENAME).open("rb") as f:
                f.seek(self._read_to)
                data = f.read()
        except FileNotFoundError:
            return
        skip = 0
        if self._read_to == 0:
            if not data.startswith(HEADER):
                return  # not a documents file kiln reads: no documents from it
            skip = len(HEADER)
        self._read_to += skip + _scan(data[skip:], self._read_to + skip, self._where)

    def _inflate(self, offset: int, length: int) -> dict[str, str]:
        with (self.root / FILENAME).open("rb") as f:
            f.seek(offset)
            return inflate(f.read(length))
