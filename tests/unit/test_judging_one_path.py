"""One judging path (kiln.judging.analysis.judge_results over a ResultTable), over a generated
fleet with every fault a site sees: each fault gives exactly its verdicts, and nothing else
fails. The two readers that fill the table (the run's compact file, and each result's document
when that is missing or damaged) fill it alike. And the cases a site throws at the compact file
(cut short by a crash, a line with a wrong column count, a file of an older kiln, a result with
no line) never pass a GPU whose result is unreadable: the results are read from their
documents. Records are written by kiln's own fetch program and collection (node_fetch)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kiln.burnin.judge import judge_run
from kiln.examples import write_example
from kiln.inventory import require_valid
from kiln.judging import compact
from kiln.judging.analysis import judge, judge_results
from kiln.judging.compact_table import read_table
from kiln.judging.pairs import pair_schedule
from kiln.judging.results import NO_RESULT
from kiln.judging.table import ResultTable
from kiln.records.burnin import load_run, write_manifest
from kiln.records.burnin_compact import load_compact
from node_fetch import collect_here

NODES = 24
_ALLREDUCE = (
    '{"kind": "allreduce", "hosts": ["n%d"], "world_size": 8, "verdict_bytes": 8, '
    '"verdict_busbw_gbs": 1.5, "rows": [{"bytes": 8, "busbw_gbs": 1.5, "algbw_gbs": 1.0, '
    '"time_us": 2.0}]}'
)


def _gemm(rng: random.Random, host: str, gpus: int = 8, **faults) -> dict:
    devices = [
        {
            "index": i, "dtype": "bfloat16", "name": "NVIDIA H100 80GB HBM3",
            "tflops": round(rng.gauss(745, 4), 1), "checksum_ok": True, "digest": "d0",
            "bit_mismatches": 0, "bit_checks": 4,
            "clocks": {"temp_c_max": 70.0, "throttle_reasons": ["sw_power_cap"]},
        }
        for i in range(gpus)
    ]  # fmt: skip
    for index, changes in faults.get("devices", {}).items():
        clocks = changes.pop("clocks", None)
        devices[index].update(changes)
        if clocks:
            devices[index]["clocks"].update(clocks)
    return {"schema_version": 1, "kind": "gemm", "hostname": host, "device_kind": "cuda",
            "host": faults.get("ran_on", host), "devices": devices}  # fmt: skip


def _allreduce(hosts: list[str], busbw: float, correct: bool = True) -> dict:
    rows = [
        {"bytes": 1 << s, "time_us": 1.0, "algbw_gbs": busbw / 1.75,
         "busbw_gbs": busbw * (1 << s) / ((1 << s) + (4 << 20))}
        for s in (20, 30, 33)
    ]  # fmt: skip
    return {"kind": "allreduce", "hosts": hosts, "world_size": 8 * len(hosts), "rows": rows,
            "verdict_bytes": 1 << 33, "verdict_busbw_gbs": rows[-1]["busbw_gbs"],
            "correct": correct}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("inv")
    write_example(root, NODES)
    return require_valid(root)


def _fleet(cluster) -> tuple[dict[str, str], dict[str, str]]:
    """Documents (name -> text) of a run with every fault a site sees, one per node."""
    rng = random.Random(7)
    nodes = [n.name for n in cluster.compute]
    faults = {
        nodes[1]: {"devices": {3: {"tflops": 400.0}}},  # a slow GPU (floor)
        nodes[2]: {"devices": {5: {"checksum_ok": False}}},  # wrong results
        nodes[3]: {"devices": {0: {"digest": "other"}}},  # bitwise unlike its node
        nodes[4]: {"devices": {2: {"bit_mismatches": 2}}},  # changed between repeats
        nodes[5]: {"devices": {6: {"clocks": {"throttle_reasons": ["hw_slowdown"]}}}},
        nodes[6]: {
            "devices": {
                1: {"error": "CUDA error: illegal address", "checksum_ok": False, "tflops": 0.0}
            }
        },
        nodes[8]: {"ran_on": nodes[9]},  # its result came from another node
        nodes[10]: {"devices": {4: {"tflops": 640.0}}},  # below its node's best, above floor
    }
    gemm = {n: json.dumps(_gemm(rng, n, **faults.get(n, {}))) for n in nodes}
    gemm[nodes[7]] = json.dumps(_gemm(rng, nodes[7], gpus=7))  # a node with 7 GPUs
    gemm[nodes[11]] = json.dumps(_gemm(rng, nodes[11])).replace(
        '"tflops": 7', '"tflops": NaN, "x": 7', 1
    )
    gemm[nodes[12]] = '{"kind": "gemm", "devices": [{"index": 0, "tflops": "garbage"}]}'
    gemm[nodes[13]] = '{"kind": "gemm", "devices": ['  # cut short on the node
    jobs = {f"node-{n}": json.dumps(_allreduce([n], rng.gauss(460, 3))) for n in nodes}
    jobs[f"node-{nodes[14]}"] = json.dumps(_allreduce([nodes[14]], 120.0))  # slow inside
    jobs[f"node-{nodes[15]}"] = json.dumps(_allreduce([nodes[15]], 460.0, correct=False))
    jobs[f"node-{nodes[16]}"] = json.dumps(_allreduce([nodes[17]], 460.0))  # ran elsewhere
    jobs[f"node-{nodes[18]}"] = ""  # no output
    del gemm[nodes[23]]  # neither a file nor a line: the job never wrote one
    link = _link(nodes)
    for r, rnd in enumerate(pair_schedule(nodes)):
        for a, b in rnd:
            slow = (a, b) == link or nodes[22] in (a, b)  # a slow link, a slow node
            jobs[f"pair-r{r}-{a}--{b}"] = json.dumps(_allreduce([a, b], 90.0 if slow else 390.0))
    jobs["fabric-ring"] = json.dumps(_allreduce(nodes, 20.0))  # below the rails' floor
    return gemm, jobs


def _link(nodes: list[str]) -> tuple[str, str]:
    """The pair whose link is slow: one the schedule runs, away from the slow node."""
    return next(p for p in pair_schedule(nodes)[0] if nodes[22] not in p and nodes[19] not in p)


def _record(tmp_path: Path, cluster, gemm, jobs, not_tested=None) -> Path:
    run = tmp_path / "run"
    nodes = [n.name for n in cluster.compute]
    write_manifest(run, run_id="r1", suite="quick", cluster=cluster.name, nodes=nodes,
                   allreduce_jobs=[*jobs, "node-never-ran"], not_tested=not_tested)  # fmt: skip
    documents = {f"gemm/{n}.json": text for n, text in gemm.items()}
    documents.update({f"allreduce/{j}.json": text for j, text in jobs.items()})
    collect_here(run, documents)
    return run


def _by_records(run: Path, cluster, not_tested=None) -> dict:
    loaded = load_run(run)
    return judge(cluster, loaded.gemm, loaded.allreduce, missing_jobs=loaded.missing_jobs,
                 run_id="r1", suite="quick", ib=loaded.ib,
                 not_tested=not_tested).to_dict()  # fmt: skip


def _expected_failures(names: list[str]) -> set[tuple[str, str]]:
    """(name, check) of every failing verdict the faults of _fleet give, and only those."""
    n = names
    return {
        (n[1], "gemm_floor"), (f"{n[1]}/gpu3", "gemm_floor"),  # 400 TFLOPS: under both floors
        (n[1], "gemm_vs_node_best"), (f"{n[1]}/gpu3", "gemm_vs_node_best"),
        (n[2], "checksum"), (f"{n[2]}/gpu5", "checksum"),  # wrong results
        (n[3], "checksum"), (f"{n[3]}/gpu0", "checksum"),  # bitwise unlike its node
        (n[4], "checksum"), (f"{n[4]}/gpu2", "checksum"),  # changed between repeats
        (n[5], "throttle"), (f"{n[5]}/gpu6", "throttle"),  # hw_slowdown
        # a CUDA error: wrong results, 0 TFLOPS, and its node's mean far below the fleet's
        (n[6], "checksum"), (f"{n[6]}/gpu1", "checksum"), (n[6], "gemm_floor"),
        (f"{n[6]}/gpu1", "gemm_floor"), (n[6], "gemm_vs_node_best"),
        (f"{n[6]}/gpu1", "gemm_vs_node_best"), (n[6], "node_vs_fleet"),
        (n[7], "gpu_count"),  # 7 of 8 GPUs
        (n[8], "tested"),  # its result came from another node
        (n[10], "gemm_vs_node_best"), (f"{n[10]}/gpu4", "gemm_vs_node_best"),
        (n[11], "result"), (n[12], "result"), (n[13], "result"),  # NaN, garbage, cut short
        (n[14], "allreduce_node"),  # slow inside the node
        (n[15], "allreduce_correct"),  # a wrong sum
        (n[16], "tested"),  # its all-reduce ran on another node
        (f"allreduce/node-{n[18]}", "result"),  # no output
        (n[19], "tested"),  # busy
        (n[22], "allreduce_pairs"),  # slow with every partner
        ("{}<->{}".format(*_link(n)), "allreduce_link"),  # slow with one partner only
        ("fabric-ring", "allreduce_fabric"),  # below the rails' floor
        ("allreduce/node-never-ran", "result"),  # in the manifest: no line, no file
        (n[23], "result"),  # no file, no line
    }  # fmt: skip


def test_each_fault_of_a_fleet_gives_its_verdicts_and_nothing_else_fails(cluster, tmp_path):
    gemm, jobs = _fleet(cluster)
    names = [n.name for n in cluster.compute]
    busy = {names[19]: "not tested (busy): jobs 12 of alice"}
    run = _record(tmp_path, cluster, gemm, jobs, busy)
    fast = load_compact(run)
    assert fast is not None, "the whole run is in the compact file: the table is read from it"
    report = judge_results(cluster, fast.table, run_id="r1", suite="quick", ib=fast.ib,
                           not_tested=busy)  # fmt: skip
    failed = {(v.name, v.check) for v in report.failures}
    assert failed == _expected_failures(names)
    assert report.drain()[names[1]].startswith("kiln: gemm gpu3 400 TFLOPS < floor")
    assert set(report.not_tested) == {names[8], names[16], names[19]}
    healthy = {v.check: v for v in report.verdicts if v.name == names[20]}
    assert set(healthy) == {
        "result", "gpu_count", "checksum", "gemm_floor", "gemm_vs_node_best", "throttle",
        "node_vs_fleet", "allreduce_node", "allreduce_pairs",
    }  # fmt: skip
    assert all(v.passed for v in healthy.values())
    assert healthy["gemm_floor"].measured == min(report.gpu_tflops[names[20]])
    assert healthy["allreduce_node"].threshold is not None
    assert len(report.allreduce) == len(jobs) - 4  # no output; the untested nodes' own jobs
    assert judge_run(run, cluster).to_dict() == report.to_dict()


def test_the_compact_file_and_the_result_files_fill_the_table_alike(cluster, tmp_path):
    gemm, jobs = _fleet(cluster)
    run = _record(tmp_path, cluster, gemm, jobs)
    from_columns = load_compact(run).table
    (run / compact.FILENAME).unlink()  # each result read from its document
    loaded = load_run(run)
    from_files = ResultTable.from_records(loaded.gemm, loaded.allreduce, loaded.missing_jobs)
    for node, row in from_files.gemm.items():  # rows, and why a node has no result
        assert from_columns.gemm.get(node, NO_RESULT) == row, node
    for job, row in from_columns.allreduce.items():
        if isinstance(row, str):  # why it has no result: the files' reader lists it apart
            assert (f"allreduce/{job}", row) in from_files.missing
        else:
            assert from_files.allreduce[job] == row, job
    node = cluster.compute[2].name  # not clean: its record, from its document either way
    assert from_columns.gemm_record(node) == from_files.gemm_record(node)
    assert _by_records(run, cluster) == judge_run(run, cluster).to_dict()


def _damaged(run: Path, how: str, gemm: dict, jobs: dict) -> None:
    path = run / compact.FILENAME
    text = path.read_text()
    if how == "cut short":  # a crash while appending: the last line has no newline
        path.write_text(text[:-40])
    elif how == "wrong column count":
        lines = text.split("\n")
        lines[3] = lines[3].replace("\t", " ", 1)
        path.write_text("\n".join(lines))
    elif how == "older kiln":  # format 3's header: lines kiln no longer reads
        path.write_text(text.replace(compact.HEADER, "#kiln-results 3\n", 1))
    elif how == "a result without its line":
        path.write_text("".join(line for line in text.splitlines(keepends=True)
                                if not line.startswith("A\tpair-r1-")))  # fmt: skip


@pytest.mark.parametrize(
    "how", ["cut short", "wrong column count", "older kiln", "a result without its line"]
)
def test_a_damaged_or_older_compact_file_falls_back_and_judges_the_same(cluster, tmp_path, how):
    gemm, jobs = _fleet(cluster)
    run = _record(tmp_path, cluster, gemm, jobs)
    expected = _by_records(run, cluster)
    _damaged(run, how, gemm, jobs)
    assert load_compact(run) is None  # never a partial answer from the columns
    assert judge_run(run, cluster).to_dict() == expected  # the records, or each file


def test_table_names_the_line_it_cannot_read():
    head = compact.HEADER.encode()
    with pytest.raises(compact.ResultError, match="line 2"):
        read_table(head + b"G\tn1\thost\t1\t1.0\n", None)
    with pytest.raises(compact.ResultError, match="line 2: cut short"):
        read_table(head + b'E\tn1\tgemm\t"x"', None)
    with pytest.raises(compact.ResultError, match="format 4"):
        read_table(b"#kiln-results 3\n", None)
    lines = [compact.encode("allreduce", f"node-n{i}", _ALLREDUCE % i) for i in range(3)]
    table = read_table(head + compact.collected(0, "".join(lines)).encode(), None)
    assert table.allreduce["node-n2"].busbw_at_fabric() == (8, 1.5)
    with pytest.raises(compact.ResultError, match="line 3: kind 'A' with 11 fields"):
        read_table(head + "".join(lines).replace("\tnode-n1\t", "\t", 1).encode(), None)
    with pytest.raises(compact.ResultError, match="line 4: lines after the last collection's"):
        read_table(head + "".join(lines).encode(), None)


def test_a_value_that_does_not_parse_falls_back_to_the_records(cluster, tmp_path):
    gemm, jobs = _fleet(cluster)
    run = _record(tmp_path, cluster, gemm, jobs)
    path = run / compact.FILENAME
    node = cluster.compute[0].name
    fields = compact.encode("allreduce", f"node-{node}", jobs[f"node-{node}"]).split("\t")
    fields[6] = "fast"  # verdict_busbw_gbs, in a later line that replaces the block's
    path.write_text(path.read_text() + "\t".join(fields))
    report = judge_run(run, cluster)  # the records path: decode fails, the files are read
    assert report.to_dict() == _by_records(run, cluster)
