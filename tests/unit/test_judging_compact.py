"""The compact result file (kiln.judging.compact) and the documents file beside it
(kiln.records.documents), as a collection writes them: the lines made on the node by kiln's
own fetch program, or by the controller where the node has no library. The contract: a run
record judged from its lines gives the same report as judged from its documents, line for
line; a result no line can hold, a damaged file or a collection cut short is judged from the
documents, so nothing is skipped and no failure is hidden."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln.burnin import collect
from kiln.burnin.judge import judge_run
from kiln.inventory import require_valid
from kiln.judging import compact
from kiln.judging.compact_table import read_table
from kiln.records.burnin import RunLayout, load_run
from kiln.records.burnin_compact import load_compact
from kiln.records.documents import FILENAME as DOCUMENTS
from kiln.records.documents import Frame, RunDocuments, append_frames
from node_fetch import collect_here, fetch_here

FIXTURES = Path(__file__).parent.parent / "fixtures" / "burnin"


def _documents(src: Path) -> dict[str, str]:
    return {
        f"{kind}/{path.name}": path.read_text(encoding="utf-8")
        for kind in ("gemm", "allreduce")
        for path in sorted((src / kind).glob("*.json"))
    }


def _collected(src: Path, tmp_path: Path, *, library: bool | bytes = True) -> tuple[Path, list]:
    """The fixture's run record as a collection writes it: its manifest, documents and lines."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700, parents=True)
    shutil.copy(src / "run.json", run / "run.json")
    said = collect_here(run, _documents(src), library=library)
    return run, said


@pytest.mark.parametrize("library", [True, False], ids=["lines-from-the-node", "lines-made-here"])
@pytest.mark.parametrize("fixture", ["gpu8", "cpu2"])
def test_a_collected_record_reads_and_judges_like_its_documents(fixture, library, tmp_path):
    src = FIXTURES / fixture / "run"
    run, said = _collected(src, tmp_path, library=library)
    assert not (run / "gemm").exists() or not list((run / "gemm").iterdir())  # no file each
    assert (run / compact.FILENAME).read_text().startswith(compact.HEADER)
    assert bool(said) is not library  # where the node had no library, collect says so
    files, packed = load_run(src), load_run(run)
    assert packed.gemm == files.gemm
    assert packed.allreduce == files.allreduce
    assert packed.missing_jobs == files.missing_jobs
    cluster = require_valid(FIXTURES / fixture / "inventory")
    assert load_compact(run) is not None  # the whole run: judged from the lines
    expected = judge_run(src, cluster).to_dict()
    got = judge_run(run, cluster).to_dict()
    expected.pop("run_id"), got.pop("run_id")
    assert got == expected
    if fixture == "gpu8":
        assert got["summary"]["drain"], "the fixture has failing nodes: the contract covers them"


def test_the_node_makes_the_lines_and_the_controller_parses_nothing(tmp_path, monkeypatch):
    def parse(_documents):
        raise AssertionError("the controller parsed a document the node had read")

    monkeypatch.setattr(collect, "result_lines", parse)
    run, said = _collected(FIXTURES / "gpu8" / "run", tmp_path)
    assert said == []
    assert load_compact(run) is not None


def test_another_kilns_library_is_not_run_and_the_lines_are_made_here(tmp_path):
    zip_, _digest = collect.library_zip()
    other = zip_.replace(b"DIGEST", b"DIGESU")  # a library without this kiln's digest
    run, said = _collected(FIXTURES / "gpu8" / "run", tmp_path, library=other)
    assert said == ["1 node(s) sent no result lines (KeyError: \"There is no item named "
                    "'DIGEST' in the archive\", e.g. n1): made here"]  # fmt: skip
    assert load_compact(run) is not None


def test_the_library_needs_only_the_standard_library_and_is_the_same_each_time(tmp_path):
    data, digest = collect.library_zip()
    collect.library_zip.cache_clear()
    assert collect.library_zip() == (data, digest)  # fixed dates: a re-install changes nothing
    (tmp_path / "lib.zip").write_bytes(data)
    program = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from kiln.burnin.node_results import result_lines; "
        "print(result_lines({'gemm/n1.json': ''})[1], end=''); "
        "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith('kiln'))[0])"
    )
    done = subprocess.run(["python3", "-I", "-S", "-c", program, str(tmp_path / "lib.zip")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout == 'E\tn1\tgemm\t"empty output"\nkiln\n'


def test_unreadable_documents_fail_the_same_way(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    docs = {
        "gemm/empty.json": "",
        "gemm/notjson.json": "{",
        "gemm/wrongkind.json": '{"kind": "allreduce"}',
        "allreduce/node-x.json": '{"kind": "allreduce", "rows": []}',
        "allreduce/node-y.json": "  \n",
    }
    collect_here(run, docs)
    lines = (run / compact.FILENAME).read_text().split("\n")[1:-2]
    assert len(lines) == 5 and all(line.startswith("E\t") for line in lines)
    loaded = load_run(run)
    table = read_table((run / compact.FILENAME).read_bytes(), None)
    assert table.gemm["empty"] == loaded.gemm["empty"].reason
    assert table.gemm["empty"] == "no result: job timed out or crashed (empty output)"
    assert {f"allreduce/{j}": r for j, r in table.allreduce.items()} == {
        m.name: m.reason for m in loaded.missing_jobs
    }


def test_a_damaged_compact_file_falls_back_to_the_documents(tmp_path):
    run, _ = _collected(FIXTURES / "gpu8" / "run", tmp_path)
    path = run / compact.FILENAME
    path.write_text(path.read_text() + "A\tbroken-line\n")
    with pytest.raises(compact.ResultError, match="line"):
        read_table(path.read_bytes(), None)
    assert load_compact(run) is None
    cluster = require_valid(FIXTURES / "gpu8" / "inventory")
    src = FIXTURES / "gpu8" / "run"
    got, expected = judge_run(run, cluster).to_dict(), judge_run(src, cluster).to_dict()
    expected.pop("run_id"), got.pop("run_id")
    assert got == expected  # from the documents: the same report


def test_a_collection_killed_between_documents_and_lines_is_judged_from_the_documents(tmp_path):
    """collect writes the documents, then the lines: killed between, the documents without
    lines are read, never a smaller run; lines lost from the file likewise."""
    run, _ = _collected(FIXTURES / "gpu8" / "run", tmp_path)
    docs = _documents(FIXTURES / "gpu8" / "run")
    late = {n.replace("node-", "late-"): t for n, t in docs.items() if "node-" in n}
    append_frames(run, [Frame.of("n1", late)])  # the frames of a second collection, no lines
    assert load_compact(run) is None
    assert {a.job for a in load_run(run).allreduce} >= {n[10:-5] for n in late}
    run, _ = _collected(FIXTURES / "gpu8" / "run", tmp_path / "again")
    path = run / compact.FILENAME
    path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                            if "node-" not in line))  # fmt: skip
    with pytest.raises(compact.ResultError, match="lines where the collection wrote"):
        read_table(path.read_bytes(), None)
    assert load_compact(run) is None
    files, packed = load_run(FIXTURES / "gpu8" / "run"), load_run(run)
    assert sorted(a.job for a in packed.allreduce) == sorted(a.job for a in files.allreduce)


def test_a_document_kept_as_a_file_is_judged_from_the_documents(tmp_path):
    run, _ = _collected(FIXTURES / "gpu8" / "run", tmp_path)
    (run / "allreduce").mkdir(exist_ok=True)
    (run / "allreduce" / "extra.json").write_text("{}")
    assert load_compact(run) is None


def test_a_documents_file_cut_short_keeps_what_came_before_and_takes_more(tmp_path):
    append_frames(tmp_path, [Frame.of("n1", {"gemm/n1.json": "one"}),
                             Frame.of("n2", {"gemm/n2.json": "two"})])  # fmt: skip
    path = tmp_path / DOCUMENTS
    path.write_bytes(path.read_bytes()[:-3])  # killed while writing the second frame
    assert RunDocuments(tmp_path).names("gemm") == {"n1"}
    append_frames(tmp_path, [Frame.of("n2", {"gemm/n2.json": "again"})])
    docs = RunDocuments(tmp_path)
    assert (docs.text("gemm/n1.json"), docs.text("gemm/n2.json")) == ("one", "again")
    (tmp_path / "gemm").mkdir()
    (tmp_path / "gemm" / "n3.json").write_text("an older kiln's file")
    assert docs.names("gemm") == {"n1", "n2", "n3"}
    assert docs.text("gemm/n3.json") == "an older kiln's file"
    with pytest.raises(ValueError, match="tab or newline"):
        append_frames(tmp_path, [Frame.of("n4", {"gemm/n\t4.json": "x"})])


def test_names_and_hosts_no_line_can_hold_are_judged_from_the_documents(tmp_path):
    doc = ('{"kind": "allreduce", "hosts": ["a,b"], "world_size": 1, "rows": [], '
           '"verdict_bytes": 1, "verdict_busbw_gbs": 1.0}')  # fmt: skip
    assert compact.encode("allreduce", "node-a", doc) == "R\tnode-a\tallreduce\n"
    assert compact.encode("gemm", "bad\tname", "{}") == ""
    run, _ = _collected(FIXTURES / "gpu8" / "run", tmp_path)
    with (run / compact.FILENAME).open("a") as f:
        f.write("R\tfabric-ring\tallreduce\n")
    assert load_compact(run) is None


def test_a_name_with_a_tab_is_dropped_on_the_node_and_said(tmp_path):
    stdout = fetch_here({"gemm/bad\tname.json": "{}", "gemm/n1.json": ""}, tmp_path)
    sent = json.loads(stdout.split("\n", 1)[0])
    assert sent["dropped"] == ["gemm/bad\tname.json"] and sent["names"] == ["gemm/n1.json"]


def test_a_later_line_replaces_an_earlier_one(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    doc = (
        '{"kind": "allreduce", "hosts": ["n1"], "world_size": 8, "correct": %s, '
        '"rows": [{"bytes": 8, "busbw_gbs": 1.5, "algbw_gbs": 1.0, "time_us": 2.0}], '
        '"verdict_bytes": 8, "verdict_busbw_gbs": 1.5}'
    )
    collect_here(run, {"allreduce/node-n1.json": doc % "true"})
    collect_here(run, {"allreduce/node-n1.json": doc % "false"})
    text = (run / compact.FILENAME).read_text()
    assert text.count(compact.HEADER) == 1 and text.count("\n") == 5  # each with its C line
    assert read_table(text.encode(), None).allreduce["node-n1"].correct == "0"
    assert load_run(run).allreduce[0].correct is False  # the later document too


def test_an_older_file_is_set_aside_when_a_newer_kiln_appends(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / compact.FILENAME).write_text('#kiln-results 3\nE\tn1\tgemm\t"old"\n')
    collect_here(run, {"gemm/n2.json": ""})
    assert (run / compact.FILENAME).read_text().startswith(compact.HEADER)
    assert (run / f"{compact.FILENAME}.old").read_text().startswith("#kiln-results 3")
    os.remove(run / f"{compact.FILENAME}.old")


def test_lines_cut_short_on_the_way_are_made_again_here(tmp_path):
    docs = _documents(FIXTURES / "gpu8" / "run")
    answer = fetch_here(docs, tmp_path / "node")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "gpu8" / "run" / "run.json", run / "run.json")
    said: list[str] = []
    collect.store_fetched(RunLayout(run), [("n1", answer[:-30])], said.append)
    assert said == ["1 node(s) sent no result lines (its lines were cut short, e.g. n1): made here"]
    assert load_compact(run) is not None
    assert load_run(run).allreduce == load_run(FIXTURES / "gpu8" / "run").allreduce
