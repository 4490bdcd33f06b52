"""The report names which all-reduce ran, and on which library: nccl-tests on the NCCL it
loaded (the pinned one), torch on the NCCL its wheel bundles, or torch's gloo on CPUs. The
label rides in the record's `implementation`, so the compact result file and the report JSON
carry it unchanged.

nccl-tests' document is completed from a recorded real all_reduce_perf run (superbench, 8x
A100); that recording has no "NCCL version" line (NCCL prints one under NCCL_DEBUG=VERSION or
INFO), so the nccl_version that kiln.burnin.nccl_tests.complete reads from such a line is given
to the document here. torch's are the documents workloads/allreduce.py prints, as in the gpu8
burn-in fixture (backend nccl, torch's NCCL 2.26.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import shared_capture
from kiln.burnin import judge_run
from kiln.burnin.nccl_tests import complete
from kiln.inventory import require_valid
from kiln.judging.compact import HEADER, collected, encode
from kiln.judging.compact_table import read_table
from kiln.judging.model import BurninReport
from kiln.judging.results import allreduce_from_doc, implementation_of
from kiln.report import render
from kiln.report.table import allreduce_summary

FIXTURES = Path(__file__).parents[1] / "fixtures"
SUPERBENCH = shared_capture(
    "nccl-tests-all_reduce_perf/a100_sxm4_40gb_8gpu_single_node_superbench.txt"
)
GPU8 = FIXTURES / "burnin" / "gpu8"


def nccl_tests_doc(nccl_version: str | None = "2.18.5+cuda12.2") -> dict:
    """The launcher's document after the recorded run, completed as collection completes it,
    with the NCCL version that complete() reads from NCCL's version line."""
    doc = complete({
        "schema_version": 1, "kind": "allreduce", "implementation": "nccl-tests",
        "hostname": "n1", "returncode": 0, "nccl_algo": "Ring",
        "output": SUPERBENCH.read_text(),
    })  # fmt: skip
    assert "nccl_version" not in doc  # the recording names none
    return {**doc, "nccl_version": nccl_version} if nccl_version else doc


def torch_doc(backend: str, nccl_version: str | None) -> dict:
    """What workloads/allreduce.py prints (its fields; the figures are not judged here)."""
    return {
        "schema_version": 1, "kind": "allreduce", "implementation": "torch",
        "hostname": "n1", "hosts": ["n1", "n1"], "world_size": 2, "backend": backend,
        "nccl_version": nccl_version,
        "rows": [{"bytes": 1024, "count": 256, "time_us": 9.0, "algbw_gbs": 0.1,
                  "busbw_gbs": 0.1}],
        "verdict_bytes": 1024, "verdict_busbw_gbs": 0.1, "correct": True, "wrong": 0,
    }  # fmt: skip


def test_each_implementation_and_library_is_named_distinctly():
    ran = allreduce_from_doc("node-n1", nccl_tests_doc())
    assert ran.implementation == "nccl-tests NCCL 2.18.5+cuda12.2"
    assert ran.label == "nccl-tests (NCCL 2.18.5+cuda12.2)"
    assert allreduce_from_doc("node-n1", nccl_tests_doc(None)).label == "nccl-tests"
    torch_nccl = allreduce_from_doc("node-n1", torch_doc("nccl", "2.26.2"))
    assert torch_nccl.label == "torch NCCL 2.26.2"
    assert allreduce_from_doc("node-n1", torch_doc("nccl", None)).label == "torch NCCL"
    gloo = allreduce_from_doc("cpu-n1", torch_doc("gloo", None))
    assert (gloo.implementation, gloo.label) == ("torch gloo", "gloo")
    # a document recorded before kiln kept the library reads as before
    old = {
        k: v for k, v in torch_doc("nccl", None).items() if k not in ("implementation", "backend")
    }
    assert implementation_of(old) == "torch" and allreduce_from_doc("j", old).label == "torch"


def test_the_summary_line_counts_runs_by_what_ran():
    report = BurninReport(cluster="c", run_id="r")
    report.allreduce = [
        allreduce_from_doc("node-n1", nccl_tests_doc()),
        allreduce_from_doc("node-n2", nccl_tests_doc()),
        allreduce_from_doc("node-n3", torch_doc("nccl", "2.26.2")),
        allreduce_from_doc("cpu-n4", torch_doc("gloo", None)),
    ]
    assert allreduce_summary(report) == (
        "4 run(s): 1 with gloo, 2 with nccl-tests (NCCL 2.18.5+cuda12.2), 1 with torch NCCL 2.26.2"
    )
    assert allreduce_summary(BurninReport(cluster="c", run_id="r")) == "none ran"


@pytest.mark.parametrize("fmt", ["table", "html"])
def test_a_burn_in_on_torch_says_so_in_the_report(fmt):
    """The gpu8 fixture's all-reduces ran on torch's own NCCL (nccl-tests was not built)."""
    report = judge_run(GPU8 / "run", require_valid(GPU8 / "inventory"))
    text = render(report, fmt, **({"width": 200} if fmt == "table" else {}))
    runs = len(report.allreduce)
    assert runs > 0
    assert f"{runs} run(s): {runs} with torch NCCL 2.26.2" in text
    assert "with torch," not in text and "nccl-tests" not in text
    stored = json.loads(render(report, "json"))
    assert {a["implementation"] for a in stored["allreduce"]} == {"torch NCCL 2.26.2"}


def test_the_compact_record_keeps_the_library():
    docs = {
        "node-n1": nccl_tests_doc(),
        "node-n2": torch_doc("nccl", "2.26.2"),
        "cpu-n3": torch_doc("gloo", None),
    }
    lines = [encode("allreduce", job, json.dumps(doc)) for job, doc in docs.items()]
    assert all(lines)
    table = read_table((HEADER + collected(0, "".join(lines))).encode(), None)
    assert {job: table.allreduce[job].label for job in docs} == {
        "node-n1": "allreduce (nccl-tests NCCL 2.18.5+cuda12.2)",
        "node-n2": "allreduce (torch NCCL 2.26.2)",
        "cpu-n3": "allreduce (torch gloo)",
    }
    records = {job: allreduce_from_doc(job, doc) for job, doc in docs.items()}
    assert {job: table.allreduce[job].implementation for job in docs} == {
        job: records[job].implementation for job in docs
    }
    assert records["node-n1"].label == "nccl-tests (NCCL 2.18.5+cuda12.2)"
