"""kiln.records.status: one vocabulary of a host's result in a stage, ranked worst first."""

from __future__ import annotations

import json

from kiln.records.status import BAD, GOOD, RANKED, UNFINISHED, HostStatus, rank, worse, worst


def test_the_members_are_the_words_records_hold_worst_first():
    assert [s.value for s in RANKED] == [
        "failed", "unreachable", "aborted", "not_run", "changed", "ok",
    ]  # fmt: skip
    assert set(HostStatus) == GOOD | BAD | UNFINISHED
    assert not (GOOD & BAD or GOOD & UNFINISHED or BAD & UNFINISHED)


def test_a_member_is_its_word_in_json_text_and_lookups():
    document = {"hosts": {"n1": {"base": HostStatus.OK, "slurm": HostStatus.NOT_RUN}}}
    assert json.dumps(document) == '{"hosts": {"n1": {"base": "ok", "slurm": "not_run"}}}'
    assert f"{HostStatus.ABORTED}" == "aborted"
    assert "changed" in GOOD and "unreachable" in BAD and "not_run" in UNFINISHED
    assert {HostStatus.FAILED: 1}["failed"] == 1


def test_worst_picks_the_worst_across_stages_and_plain_strings_rank_like_members():
    assert worst(["ok", "changed", "ok"]) == "changed"
    assert worst([HostStatus.OK, "not_run", "aborted"]) == HostStatus.ABORTED
    assert worst(["changed", "unreachable", "failed"]) == "failed"
    assert worst(["ok"]) == "ok"
    assert worse("unreachable", "changed") and not worse("ok", "ok")


def test_a_word_kiln_does_not_know_ranks_below_every_known_one():
    assert rank("exploded") < rank(HostStatus.FAILED)
    assert worst(["failed", "exploded", "ok"]) == "exploded"
