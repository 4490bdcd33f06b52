"""The inotify check `kiln sandbox up` runs before starting systemd node containers: on a
stand-in /proc (descriptors as symlinks, as the kernel shows them) and limit file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiln.errors import EnvironmentProblem, ExitCode
from kiln.sandbox.host_limits import INOTIFY_PER_NODE, inotify_in_use, require_inotify_headroom


def _proc(root: Path, processes: dict[str, list[str]]) -> Path:
    for pid, targets in processes.items():
        fd = root / pid / "fd"
        fd.mkdir(parents=True)
        for number, target in enumerate(targets):
            os.symlink(target, fd / str(number))
    (root / "self").mkdir()  # not a pid: skipped
    return root


def _limit(tmp_path: Path, value: str) -> Path:
    path = tmp_path / "max_user_instances"
    path.write_text(value)
    return path


def test_counts_only_inotify_descriptors(tmp_path):
    proc = _proc(tmp_path / "proc", {
        "1": ["anon_inode:inotify", "anon_inode:inotify", "/dev/null", "socket:[42]"],
        "77": ["anon_inode:[eventpoll]", "anon_inode:inotify"],
        "78": [],
    })  # fmt: skip
    assert inotify_in_use(proc) == 3


def test_room_enough_passes_and_debians_default_refuses_32_nodes(tmp_path):
    proc = _proc(tmp_path / "proc", {"1": ["anon_inode:inotify"] * 10})
    require_inotify_headroom(2, limit_file=_limit(tmp_path, "128"), proc=proc)
    require_inotify_headroom(32, limit_file=_limit(tmp_path, "2048"), proc=proc)
    with pytest.raises(EnvironmentProblem) as caught:
        require_inotify_headroom(32, limit_file=_limit(tmp_path, "128\n"), proc=proc)
    error = caught.value
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert f"about {32 * INOTIFY_PER_NODE} inotify instances" in error.message
    assert "10 are in use and the host allows 128" in error.message
    assert "sysctl -w fs.inotify.max_user_instances=1024" in error.hint


def test_nothing_new_or_no_limit_file_is_not_checked(tmp_path):
    proc = _proc(tmp_path / "proc", {"1": ["anon_inode:inotify"] * 500})
    require_inotify_headroom(0, limit_file=_limit(tmp_path, "128"), proc=proc)
    require_inotify_headroom(5, limit_file=tmp_path / "absent", proc=proc)
