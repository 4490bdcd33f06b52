"""Stage and shard outcomes: typed in memory, the summary's documents only at the record
boundary, read back the same (records written before the types still read)."""

from __future__ import annotations

import json
from pathlib import Path

from test_runner import plan_options, provision_run
from test_shards import STAGE, fleet, runner  # noqa: F401 - `runner` is a fixture

from kiln.plan.shards import Shard
from kiln.plan.stages import Stage
from kiln.records.status import HostStatus
from kiln.runner import merge
from kiln.runner.events import HostResult
from kiln.runner.outcome import NOT_STARTED, ShardOutcome, StageOutcome

STAGE_KEYS = ["name", "playbook", "status", "rc", "reached_recap", "batches", "expected_batches",
              "stopped_by_failure_threshold", "changed", "artifact_dir", "hosts", "shards",
              "shards_not_started"]  # fmt: skip
SKIPPED_KEYS = ["name", "playbook", "status", "reason", "rc", "reached_recap", "batches",
                "expected_batches", "stopped_by_failure_threshold", "changed", "hosts"]  # fmt: skip
SHARD_KEYS = ["name", "worker", "status", "rc", "reached_recap", "batches", "expected_batches",
              "stopped_by_failure_threshold", "changed", "artifact_dir", "started", "finished",
              "hosts", "counts"]  # fmt: skip


def ran(name: str, statuses: dict[str, str], **fields) -> ShardOutcome:
    hosts = {host: HostResult(host, status, ok=1) for host, status in statuses.items()}
    fields = {"reached_recap": True, "batches": 1, "expected_batches": 1, **fields}
    return ShardOutcome(name, "successful", hosts, rc=0, artifact_dir=f"/r/{name}", **fields)


def stage_outcome() -> StageOutcome:
    folded = merge.StageMerge("base", "base.yml", ["ctl", "a1", "a2", "b1"], directory="/r")
    folded.add(ran("controllers", {"ctl": HostStatus.CHANGED}, controllers=True, started="t0"))
    folded.add(ran("rack-ra", {"a1": HostStatus.OK, "a2": HostStatus.FAILED}, worker="w1"))
    folded.not_started.append(Shard("rack-rb", ("b1",), worker="w2", batches=1))
    return folded.entry()


def test_a_stage_writes_the_summary_keys_and_reads_back_equal():
    outcome = stage_outcome()
    document = json.loads(json.dumps(outcome.to_dict()))  # as summary.json holds it
    assert list(document) == STAGE_KEYS
    assert [list(s) for s in document["shards"][:2]] == [SHARD_KEYS, SHARD_KEYS]
    assert document["shards"][2] == {"name": "rack-rb", "hosts": ["b1"], "worker": "w2",
                                     "status": NOT_STARTED}  # fmt: skip
    assert document["shards_not_started"] == ["rack-rb"]
    assert document["hosts"]["b1"] == HostResult("b1").to_dict()  # not run: every counter 0
    assert document["shards"][1]["counts"] == {"ok": 1, "failed": 1}
    back = StageOutcome.from_dict(document)
    assert back == outcome
    assert back.to_dict() == document
    assert back.shards[0].controllers and not back.shards[1].controllers  # by its name


def test_skipped_and_crashed_stages_keep_their_shorter_documents():
    stage = Stage("slurm", "slurm.yml", "")
    skipped = merge.skipped_stage(stage, "lock lost")
    assert list(skipped.to_dict()) == SKIPPED_KEYS and skipped.shards is None
    crashed = merge.crashed_stage(stage, ["n1"], "kiln error: boom")
    document = json.loads(json.dumps(crashed.to_dict()))
    assert list(document) == SKIPPED_KEYS and document["status"] == "error"
    assert document["hosts"]["n1"]["status"] == "failed"
    for outcome in (skipped, crashed):
        assert StageOutcome.from_dict(outcome.to_dict()) == outcome


def test_a_shard_reads_back_from_its_view_and_the_stages_hosts():
    shard = ran("rack-ra", {"a1": HostStatus.OK}, worker="w1", started="t0", finished="t1")
    hosts = dict(shard.hosts)
    assert ShardOutcome.from_dict(shard.to_dict(), hosts) == shard
    waiting = ShardOutcome.not_started(Shard("rack-rb", ("b1", "b2"), worker="w2"))
    assert ShardOutcome.from_dict(waiting.to_dict(), {}) == waiting
    assert waiting.bad_hosts() == 0 and not waiting.ran


def test_a_real_summary_reads_back_into_the_outcomes_it_was_written_from(tmp_path, runner):  # noqa: F811
    runner.outcome.update(b1="failed")
    cluster = fleet(tmp_path, max_fail_percentage=0, max_parallel_shards=1)
    summary = provision_run(cluster, plan_options([STAGE]), home=tmp_path / "state")
    written = json.loads((Path(summary["record"]) / "summary.json").read_text())
    for document in written["stages"]:
        assert StageOutcome.from_dict(document).to_dict() == document
    assert written["stages"][0]["shards_not_started"]  # the rollout stopped: one kind of each
    # what the stage cost, measured where it ran: wall seconds and this controller's CPU
    stage = written["stages"][0]
    assert 0 < stage["seconds"] < 600 and stage["controller_cpu_s"] >= 0
    keys = list(stage)
    assert keys[keys.index("changed") + 1 : keys.index("changed") + 3] == [
        "seconds", "controller_cpu_s"]  # fmt: skip


def test_an_older_stage_without_its_cost_reads_back_as_it_was():
    outcome = stage_outcome()
    assert outcome.seconds is None and "seconds" not in outcome.to_dict()
    outcome.seconds, outcome.controller_cpu_s = 12.5, 3.25
    document = json.loads(json.dumps(outcome.to_dict()))
    assert (document["seconds"], document["controller_cpu_s"]) == (12.5, 3.25)
    assert StageOutcome.from_dict(document) == outcome
