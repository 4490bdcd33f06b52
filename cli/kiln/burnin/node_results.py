"""A node's burn-in results made ready where they were born: run on the node at collection.

    documents, lines = result_lines({"gemm/<node>.json": text, "allreduce/<job>.json": ...})

kiln.burnin.collect ships this module, with the few it needs (`LIBRARY`: the standard library
and nothing else), to every node as one zip (the burnin stage installs it), and its fetch
program runs it there: each all-reduce document completed from nccl-tests' output
(kiln.burnin.nccl_tests), each result's compact line made (kiln.judging.compact.encode), so
the controller, bringing 12,500 nodes home, parses none of their 112,500 documents. Where a
node cannot run it (no zip, another kiln's zip, a Python too old), the controller runs the same
function on what that node sent. Pure: text in, text out.
"""

from __future__ import annotations

from kiln.burnin.nccl_tests import complete_text
from kiln.judging import compact

# The modules the nodes need, as paths under kiln/ (kiln.burnin.collect.library_zip); the
# packages' __init__ modules of judging and burnin are shipped empty (theirs import the rest).
LIBRARY = (
    "__init__.py",
    "errors.py",
    "parsers/__init__.py",
    "parsers/_common.py",
    "parsers/nccl_tests.py",
    "judging/results.py",
    "judging/table.py",
    "judging/compact.py",
    "burnin/nccl_tests.py",
    "burnin/node_results.py",
)
EMPTY_PACKAGES = ("judging/__init__.py", "burnin/__init__.py")


def result_lines(documents: dict[str, str]) -> tuple[dict[str, str], str]:
    """(the documents, each all-reduce completed from nccl-tests' output; their compact lines,
    in the same order). Names are "gemm/<node>.json" or "allreduce/<job>.json"."""
    done: dict[str, str] = {}
    lines: list[str] = []
    for name, text in documents.items():
        kind, _, file = name.partition("/")
        if kind == "allreduce":
            text = complete_text(text)
        done[name] = text
        lines.append(compact.encode(kind, file.removesuffix(".json"), text))
    return done, "".join(lines)
