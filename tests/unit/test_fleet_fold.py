"""dshbak-style folding of per-node results: grouping, order, headers, the whole text."""

from __future__ import annotations

from kiln.fleet.execute import CommandOutcome, ExecResult, NodeResult
from kiln.fleet.fold import fold_results, render_text, summary


def ok(name: str, stdout: str, **kw) -> NodeResult:
    return NodeResult(name, f"10.0.0.{name[-2:]}", CommandOutcome.OK, 0, stdout, **kw)


def fleet() -> list[NodeResult]:
    results = [ok(f"gpu{i:03d}", "8 GPUs\n") for i in range(1, 41) if i != 3]
    results.insert(2, ok("gpu003", "7 GPUs\n"))  # differs: folds apart
    results.append(ok("gpu042", "8 GPUs\n"))
    results.append(
        NodeResult("gpu043", "a", CommandOutcome.FAILED, 9, "", "NVIDIA-SMI has failed\n")
    )
    results.append(
        NodeResult("gpu044", "a", CommandOutcome.FAILED, 9, "", "NVIDIA-SMI has failed\n")
    )
    killed = "still running after 2s: killed"
    results.append(
        NodeResult("gpu045", "a", CommandOutcome.TIMEOUT, None, "partial\n", error=killed)
    )
    refused = "port 22: Connection refused"
    results.append(NodeResult("gpu050", "a", CommandOutcome.UNREACHABLE, error=refused))
    results.append(NodeResult("gpu051", "a", CommandOutcome.UNREACHABLE, error=refused))
    results.append(NodeResult("gpu052", "a", CommandOutcome.HOSTKEY, error="unknown host key ..."))
    return results


def test_identical_answers_fold_under_one_hostlist_largest_first():
    folds, problems = fold_results(fleet())
    assert [(f.hostlist, len(f.hosts), f.status, f.exit_code) for f in folds] == [
        ("gpu[001-002,004-040,042]", 40, CommandOutcome.OK, 0),
        ("gpu[043-044]", 2, CommandOutcome.FAILED, 9),
        ("gpu003", 1, CommandOutcome.OK, 0),  # ties keep inventory order: gpu003 before gpu045
        ("gpu045", 1, CommandOutcome.TIMEOUT, None),
    ]
    assert [(p.hostlist, p.status, p.error) for p in problems] == [
        ("gpu[050-051]", CommandOutcome.UNREACHABLE, "port 22: Connection refused"),
        ("gpu052", CommandOutcome.HOSTKEY, "unknown host key ..."),
    ]


def test_the_whole_rendered_text():
    assert render_text(*fold_results(fleet())) == (
        "---- gpu[001-002,004-040,042] (40) ----\n"
        "8 GPUs\n"
        "---- gpu[043-044] (2) exit 9 ----\n"
        "-- stderr --\n"
        "NVIDIA-SMI has failed\n"
        "---- gpu003 (1) ----\n"
        "7 GPUs\n"
        "---- gpu045 (1) timeout ----\n"
        "partial\n"
        "-- still running after 2s: killed --\n"
        "---- gpu[050-051] (2) unreachable ----\n"
        "port 22: Connection refused\n"
        "---- gpu052 (1) hostkey ----\n"
        "unknown host key ...\n"
    )


def test_same_stdout_different_exit_code_or_stderr_do_not_fold():
    results = [
        NodeResult("n1", "a", CommandOutcome.OK, 0, "x\n"),
        NodeResult("n2", "a", CommandOutcome.FAILED, 1, "x\n"),
        NodeResult("n3", "a", CommandOutcome.OK, 0, "x\n", "warning\n"),
        NodeResult("n4", "a", CommandOutcome.OK, 0, "x\n"),
    ]
    folds, problems = fold_results(results)
    assert [f.hostlist for f in folds] == ["n[1,4]", "n2", "n3"]
    assert problems == []


def test_no_output_and_no_status_exit_code():
    results = [
        NodeResult("n1", "a", CommandOutcome.OK, 0),
        NodeResult("n2", "a", CommandOutcome.FAILED, None),
    ]
    assert render_text(*fold_results(results)) == ("---- n1 (1) ----\n---- n2 (1) failed ----\n")
    assert render_text([], []) == ""


def test_summary_counts_only_what_happened():
    result = ExecResult("true", fleet(), duration=2.04, fanout=64, timeout=2)
    assert summary(result) == (
        "47 node(s): 41 ok, 2 failed, 2 unreachable, 1 timeout, 1 hostkey in 2.0s"
    )
    assert result.counts == {"ok": 41, "failed": 2, "unreachable": 2, "timeout": 1, "hostkey": 1}
    assert not result.ok
    assert ExecResult("true", fleet()[:3], 0.1, 64, 2).ok
