"""The compact result file (kiln.judging.compact): what collect appends beside each result's
own file, and what load_run reads first. The contract: a run record judged through its compact
file gives the same results and the same report as judged from its files, line for line;
a result the compact file cannot hold, or a compact file that is damaged, is read from its file,
so nothing is skipped and no failure is hidden."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kiln.burnin.collect import append_compact, store
from kiln.burnin.judge import judge_run
from kiln.inventory import require_valid
from kiln.judging import compact
from kiln.judging.results import (
    AllreduceResult,
    BandwidthRow,
    PackedRows,
    allreduce_from_doc,
)
from kiln.judging.thresholds import FABRIC_BYTES
from kiln.records.burnin import RunLayout, load_run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "burnin"


def _with_compact(src: Path, tmp_path: Path) -> Path:
    """A copy of a fixture run record plus the compact file collect would have written."""
    run = tmp_path / "run"
    shutil.copytree(src, run)
    layout = RunLayout(run)
    lines = [
        store(layout, "n", f"{kind}/{path.name}", path.read_text(encoding="utf-8"))
        for kind in ("gemm", "allreduce")
        for path in sorted((run / kind).glob("*.json"))
    ]
    append_compact(layout, lines)
    return run


@pytest.mark.parametrize("fixture", ["gpu8", "cpu2"])
def test_compact_record_reads_and_judges_like_its_files(fixture, tmp_path):
    src = FIXTURES / fixture / "run"
    run = _with_compact(src, tmp_path)
    text = (run / compact.FILENAME).read_text()
    assert text.startswith(compact.HEADER)
    files, packed = load_run(src), load_run(run)
    assert packed.gemm == files.gemm
    assert packed.allreduce == files.allreduce
    assert packed.missing_jobs == files.missing_jobs
    assert [a.rows for a in packed.allreduce] == [a.rows for a in files.allreduce]
    cluster = require_valid(FIXTURES / fixture / "inventory")
    expected = judge_run(src, cluster).to_dict()
    got = judge_run(run, cluster).to_dict()
    expected.pop("run_id"), got.pop("run_id")
    assert got == expected
    if fixture == "gpu8":
        assert got["summary"]["drain"], "the fixture has failing nodes: the contract covers them"


def test_the_compact_file_is_what_is_read(tmp_path):
    """With the compact file present, a result is read from it, not from its file."""
    run = _with_compact(FIXTURES / "gpu8" / "run", tmp_path)
    for path in (run / "allreduce").glob("*.json"):
        path.write_text("garbage")
    (run / "gemm" / "gpu001.json").unlink(missing_ok=True)
    files = load_run(FIXTURES / "gpu8" / "run")
    packed = load_run(run)
    assert packed.allreduce == files.allreduce and packed.gemm == files.gemm


def test_unreadable_documents_fail_the_same_way(tmp_path):
    run = tmp_path / "run"
    layout = RunLayout(run)
    (run / "gemm").mkdir(parents=True)
    (run / "allreduce").mkdir()
    docs = {
        "gemm/empty.json": "",
        "gemm/notjson.json": "{",
        "gemm/wrongkind.json": '{"kind": "allreduce"}',
        "allreduce/node-x.json": '{"kind": "allreduce", "rows": []}',
        "allreduce/node-y.json": "  \n",
    }
    for rel, text in docs.items():
        (run / rel).write_text(text)
    files = load_run(run)
    append_compact(layout, [store(layout, "x", rel, text) for rel, text in docs.items()])
    assert all(line.startswith("E\t") for line in (run / compact.FILENAME).read_text().split(
        "\n")[1:-1])  # fmt: skip
    packed = load_run(run)
    assert packed.gemm == files.gemm
    assert packed.missing_jobs == files.missing_jobs
    assert {n.reason for n in packed.gemm.values()} >= {
        "no result: job timed out or crashed (empty output)"
    }


def test_a_damaged_compact_file_falls_back_to_the_files(tmp_path):
    run = _with_compact(FIXTURES / "gpu8" / "run", tmp_path)
    path = run / compact.FILENAME
    path.write_text(path.read_text() + "A\tbroken-line\n")
    with pytest.raises(compact.ResultError, match="line"):
        compact.decode(path.read_text())
    files = load_run(FIXTURES / "gpu8" / "run")
    assert load_run(run).gemm == files.gemm  # from the files: the same results


def test_results_missing_from_the_compact_file_are_read_from_their_files(tmp_path):
    """collect stopped between storing the files and appending the lines: nothing is lost."""
    run = _with_compact(FIXTURES / "gpu8" / "run", tmp_path)
    path = run / compact.FILENAME
    kept = [line for line in path.read_text().split("\n") if "node-" not in line]
    path.write_text("\n".join(kept))
    files = load_run(FIXTURES / "gpu8" / "run")
    packed = load_run(run)
    assert sorted(a.job for a in packed.allreduce) == sorted(a.job for a in files.allreduce)
    assert set(packed.allreduce) == set(files.allreduce)


def test_names_and_hosts_the_format_cannot_hold_are_left_to_their_files():
    doc = '{"kind": "allreduce", "hosts": ["a,b"], "world_size": 1, "rows": [], ' \
        '"verdict_bytes": 1, "verdict_busbw_gbs": 1.0}'  # fmt: skip
    assert compact.encode("allreduce", "node-a", doc) == ""
    assert compact.encode("gemm", "bad\tname", "{}") == ""


def test_a_later_line_replaces_an_earlier_one(tmp_path):
    layout = RunLayout(tmp_path)
    doc = (
        '{"kind": "allreduce", "hosts": ["n1"], "world_size": 8, "correct": %s, '
        '"rows": [{"bytes": 8, "busbw_gbs": 1.5, "algbw_gbs": 1.0, "time_us": 2.0}], '
        '"verdict_bytes": 8, "verdict_busbw_gbs": 1.5}'
    )
    append_compact(layout, [compact.encode("allreduce", "node-n1", doc % "true")])
    append_compact(layout, [compact.encode("allreduce", "node-n1", doc % "false")])
    text = (tmp_path / compact.FILENAME).read_text()
    assert text.count(compact.HEADER) == 1
    assert compact.decode(text).allreduce["node-n1"].correct is False


def test_packed_rows_decode_to_the_same_rows_and_row_at_size():
    rows = [[1 << s, 10.0 + s, 5.0, 1.5] for s in (20, 30, 33)]
    keys = ("bytes", "busbw_gbs", "algbw_gbs", "time_us")
    doc = {
        "kind": "allreduce", "hosts": ["a", "b"], "world_size": 16, "verdict_bytes": 1 << 33,
        "verdict_busbw_gbs": 43.0, "correct": True, "nccl_algo": "Ring",
        "rows": [dict(zip(keys, r, strict=True)) for r in rows],
    }  # fmt: skip
    plain = allreduce_from_doc("pair-r0-a--b", doc)
    import json

    packed = compact.decode(compact.HEADER + compact.encode("allreduce", "pair-r0-a--b",
                                                            json.dumps(doc)))  # fmt: skip
    result = packed.allreduce["pair-r0-a--b"]
    assert isinstance(result, AllreduceResult) and isinstance(result.rows, PackedRows)
    assert result == plain and hash(result) == hash(plain)
    assert result.busbw_at(FABRIC_BYTES) == plain.busbw_at(FABRIC_BYTES) == (FABRIC_BYTES, 43.0)
    assert result.busbw_at(1 << 30) == plain.busbw_at(1 << 30) == (1 << 30, 40.0)
    assert list(result.rows) == [BandwidthRow(b, bus, alg, t) for b, bus, alg, t in rows]
    doc["rows"] = doc["rows"][:2]  # no row at FABRIC_BYTES: the verdict's figure, as before
    again = compact.decode(compact.HEADER + compact.encode("allreduce", "j", json.dumps(doc)))
    plain = allreduce_from_doc("j", doc)
    assert again.allreduce["j"].busbw_at(FABRIC_BYTES) == plain.busbw_at(FABRIC_BYTES)


def test_a_result_stored_after_the_compact_file_is_read_and_a_missing_one_fails(tmp_path):
    """The loader lists a result directory only when an entry was added there after the compact
    file's last lines (collect cut short); a submitted job with no result is still a failure."""
    import json
    import os

    run = _with_compact(FIXTURES / "gpu8" / "run", tmp_path)
    manifest = json.loads((run / "run.json").read_text())
    manifest["allreduce_jobs"] = [*manifest.get("allreduce_jobs", []), "node-never-ran"]
    (run / "run.json").write_text(json.dumps(manifest))
    src = run / "allreduce" / "fabric-ring.json"
    late = run / "allreduce" / "late-extra.json"
    late.write_text(src.read_text())
    past = (run / compact.FILENAME).stat().st_mtime_ns - 10**9  # however coarse the clock
    os.utime(run / compact.FILENAME, ns=(past + 2, past + 2))
    os.utime(run / "allreduce", ns=(past + 5, past + 5))  # the late file came after
    loaded = load_run(run)
    assert "late-extra" in {a.job for a in loaded.allreduce}
    missing = {j.name: j.reason for j in loaded.missing_jobs}
    assert missing["allreduce/node-never-ran"] == "no result: job timed out or crashed (no output)"
    os.utime(run / "allreduce", ns=(past, past))  # nothing added since: no listing, same runs
    again = load_run(run)
    assert {j.name for j in again.missing_jobs} == set(missing)
    assert "late-extra" not in {a.job for a in again.allreduce}  # the listing was skipped
