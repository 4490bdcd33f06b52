"""scontrol show node and sinfo against recorded real outputs."""

from pathlib import Path

import pytest

from captures import shared_capture
from kiln.parsers import ParseError
from kiln.parsers.drain_reason import is_kiln_reason
from kiln.parsers.slurm import (
    SINFO_REASON_FIELDS,
    Gres,
    parse_gres,
    parse_scontrol_nodes,
    parse_sinfo,
    parse_sinfo_reasons,
)

REAL = Path(__file__).parent.parent / "fixtures/real/slurm-sinfo-scontrol"
SCONTROL = shared_capture(
    "slurm-sinfo-scontrol/scontrol_show_node_gpu_gres_drain_huji_slurm1711.txt"
)
SINFO = shared_capture("slurm-sinfo-scontrol/sinfo_nodes_gres_vpenso.txt")


def test_scontrol_nodes_and_gres() -> None:
    nodes = {n.name: n for n in parse_scontrol_nodes(SCONTROL.read_text())}
    assert list(nodes) == ["cortex-01", "dumfries-002", "oxygen-04", "cricket"]
    cortex = nodes["cortex-01"]
    assert (cortex.state, cortex.state_flags, cortex.drain) == ("ALLOCATED", (), False)
    assert cortex.gres == (Gres("gpu", "m60", 8),)
    assert cortex.gpus == 8
    assert cortex.gres_used == (Gres("gpu", "m60", 8, "IDX:0-7"),)
    assert cortex.cfg_tres == {"cpu": "16", "mem": "257860M", "billing": "16", "gres/gpu": "8"}
    assert cortex.alloc_tres["mem"] == "192G"
    assert cortex.fields["OS"] == "Linux 4.14.61-aufs-1 #1 SMP Tue Aug 7 18:13:22 IDT 2018"
    assert cortex.fields["RealMemory"] == "257860"
    assert cortex.partitions == ["short", "killable"]
    assert cortex.reason is None
    cricket = nodes["cricket"]
    assert cricket.gres == (Gres("gpu", "quadro", 1, "S:0"), Gres("vmem", None, 2 * 1024**3))
    assert cricket.gpus == 1
    assert cricket.fields["NodeHostName"] == "cricket"


def test_scontrol_drained_node_reason() -> None:
    node = {n.name: n for n in parse_scontrol_nodes(SCONTROL.read_text())}["oxygen-04"]
    assert (node.state, node.state_flags, node.drain) == ("IDLE", ("DRAIN",), True)
    assert node.reason is not None
    assert node.reason.text == "memory issues?"
    assert (node.reason.user, node.reason.time) == ("root", "2019-01-29T10:42:12")
    assert not is_kiln_reason(node.reason.text)
    assert node.gres == () and node.gpus == 0
    assert node.alloc_tres == {}
    assert "gres/gpu" not in node.cfg_tres


def test_scontrol_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_scontrol_nodes("Node cortex-01 not found\n")
    assert info.value.tool == "scontrol show node"
    assert info.value.line_no == 1


def test_sinfo_nodes_gres() -> None:
    rows = parse_sinfo(SINFO.read_text())
    assert len(rows) == 37
    assert rows[0].node == "test-blue03" and rows[0].gres == (Gres("gpu", None, 4),)
    orange = {r.node: r for r in rows if r.node.startswith("test-orange")}
    assert len(orange) == 20
    assert orange["test-orange08"].gres == (Gres("gpu", None, 8, "S:0-1"),)
    assert sum(r.gpus for r in rows) == 4 + 20 * 8
    assert next(r for r in rows if r.node == "test-blue01").gres == ()


def test_sinfo_malformed() -> None:
    with pytest.raises(ParseError) as info:
        parse_sinfo("test-blue03 gpu:4\ntest-blue01\n")
    assert info.value.tool == "sinfo"
    assert info.value.line_no == 2


def test_gres_kiln_reason_and_unreadable_gres() -> None:
    assert parse_gres("gpu:h100:8(S:0-1)") == [Gres("gpu", "h100", 8, "S:0-1")]
    with pytest.raises(ParseError, match="cannot read GRES item"):
        parse_gres("gpu:h100:8:extra")


def test_sinfo_reasons_read_from_the_right_so_a_reason_may_hold_spaces() -> None:
    """Real `sinfo -R` (REASON USER TIMESTAMP NODELIST): the reason comes first and holds
    spaces, so the three columns after it are read from the right."""
    text = (REAL / "sinfo_R_gres_core_mismatch_unige_baobab.txt").read_text()
    rows = parse_sinfo_reasons(text)
    assert len(rows) == 10 and rows[0].node == "cpu242"
    assert [(r.reason.text, r.reason.user, r.reason.time) for r in rows[:1]] == [
        ("issue-5894", "root", "2025-04-02T16:01:38")
    ]
    gpus = next(r for r in rows if r.node == "gpu[013-017,021-026,034-044,046-049]")
    assert gpus.values == {
        "reason": "gres/gpu GRES core s",  # cut at 20 characters by sinfo itself
        "user": "slurm",
        "timestamp": "2025-04-03T15:48:07",
        "node": "gpu[013-017,021-026,034-044,046-049]",
    }
    assert gpus.reason is not None and gpus.reason.user == "slurm"
    # The same columns through parse_sinfo: the reason column takes the slack wherever it is.
    assert parse_sinfo(text, SINFO_REASON_FIELDS) == rows
