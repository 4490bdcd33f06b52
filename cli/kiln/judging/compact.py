"""The compact result file: every gemm and all-reduce result of a run as one line, its row.

A run's workload documents are kept whole in its record (kiln.records.documents); at 12,500
nodes they are 112,500 documents, and parsing them costs more than judging them. So each
result's line is made where its document is born: on the node, when kiln.burnin.collect
fetches the run (kiln.burnin.node_results runs `encode` there; the controller runs it only for
a node that could not), and the controller appends the nodes' lines as they come to
`<run>/results.compact`, which judging reads in one go (kiln.judging.compact_table). Format 4:

    #kiln-results 4
    G<TAB>node<TAB>host<TAB>clean 0|1<TAB>throttle reasons, sorted, comma-joined<TAB>
      tflops per device, comma-joined
    A<TAB>job<TAB>hosts, comma-joined<TAB>world_size<TAB>implementation<TAB>verdict_bytes<TAB>
      verdict_busbw_gbs<TAB>correct 0|1<TAB>ring 0|1<TAB>wrong<TAB>size<TAB>busbw at size|
    E<TAB>name<TAB>gemm|allreduce<TAB>"why the document could not be read" (a JSON string)
    R<TAB>name<TAB>gemm|allreduce      a result its line cannot hold (a tab in a field, a comma
                                        in a host): judged from its record (load_run)
    C<TAB>bytes<TAB>lines               after each collection's lines: the size of the run's
                                        documents file then (whose frames those lines are of),
                                        and how many result lines the collection wrote

A line's fields are its row in the table the rules judge (kiln.judging.table: gemm_row and
allreduce_row give them, here and for records read one document at a time): `clean` is 1
when every device's checksum is ok, none has an error or a changed repeat, all digests agree
and every TFLOPS figure is finite; a row that is not clean is judged from its record, built
from the document when a rule needs the devices. Lines are made only from results the readers
accepted (gemm_from_doc, allreduce_from_doc), so a line and its document judge the same; a
later line replaces an earlier one for the same name (a second collection). A file must end
with a newline (else a write was cut short), and each collection's C line must count the
lines before it (else lines were lost); a documents file larger than the last C line says has
frames whose lines were never written (a collection killed between the two), and the run is
read from its documents (kiln.records.burnin_compact). Older formats (2, 3: records in the
lines) are not read: the kiln that wrote them kept every document as its own file, which
load_run reads.

Needs nothing beyond the standard library and the modules it imports (the nodes run it).
"""

from __future__ import annotations

import json

from kiln.judging.results import ResultError, allreduce_from_doc, gemm_from_doc
from kiln.judging.table import NOT_CLEAN, allreduce_row, gemm_row

FORMAT = 4
HEADER = f"#kiln-results {FORMAT}\n"
FILENAME = "results.compact"
_UNSAFE = ("\t", "\n", "\r")


def read_document(text: str) -> object:
    """A workload's JSON document; ResultError says why not (the record loader's words)."""
    if not text.strip():
        raise ResultError("empty output")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"not JSON: {exc.msg} at line {exc.lineno}") from None


def _safe(*texts: str) -> bool:
    return not any(c in t for t in texts for c in _UNSAFE)


def encode(kind: str, name: str, text: str) -> str:
    """One line for a workload's document ("gemm" or "allreduce"); "" for a name no line can
    hold (a tab or newline in it: the result is then judged from its record)."""
    if kind not in ("gemm", "allreduce") or not _safe(name):
        return ""
    try:
        doc = read_document(text)
        if kind == "gemm":
            row = gemm_row(gemm_from_doc(name, doc))
            if not _safe(*row):  # a tab or newline in a host or a throttle reason
                row = NOT_CLEAN
            return "G\t" + "\t".join((name, *row)) + "\n"
        result = allreduce_from_doc(name, doc)
        row = allreduce_row(result)
        if not _safe(*row) or any("," in h or not h for h in result.hosts):
            return f"R\t{name}\t{kind}\n"
        return "A\t" + "\t".join((name, *row)) + "\n"
    except ResultError as exc:
        return f"E\t{name}\t{kind}\t{json.dumps(str(exc))}\n"


def collected(size: int, lines: str) -> str:
    """A collection's result lines and the line that closes them: the documents file's size
    once its frames were in, and how many lines there are."""
    return f"{lines}C\t{size}\t{lines.count(chr(10))}\n"


def last_collected(data: bytes) -> int | None:
    """The documents file's size the last C line of a compact file's bytes gives (None: no
    such line, or not a number)."""
    at = data.rfind(b"\nC\t")
    if at < 0:
        return None
    end = data.find(b"\t", at + 3)
    try:
        return int(data[at + 3 : end])
    except ValueError:
        return None
