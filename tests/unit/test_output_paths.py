"""`-o/--output` of kiln burnin, kiln fabric topology and kiln plan to a path kiln cannot write:
exit 3 with one line naming it, no traceback, and (burn-in, the fabric capture) before any
work starts. Like `kiln report -o` (tests/unit/test_input_hardening.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.app import main
from kiln.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
FABRIC = ROOT / "tests" / "fixtures" / "fabric"
KILN = str(Path(sys.executable).parent / "kiln")


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def _bad_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("x\n")
    return {
        "a file where a folder belongs": tmp_path / "a-file",
        "a folder under a file": tmp_path / "a-file" / "out",
        "a filesystem nobody writes": Path("/proc/kiln-out"),
    }


def _one_line(code: int, out: str, err: str, path: Path) -> None:
    assert code == ExitCode.ENVIRONMENT, err
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: cannot write ") and str(path) in lines[0], lines
    assert all(line.startswith("  hint: ") for line in lines[1:]), lines


@pytest.mark.parametrize("kind", ["a file where a folder belongs", "a folder under a file",
                                  "a filesystem nobody writes"])  # fmt: skip
def test_burnin_output_unwritable_exits_3_before_the_campaign(tmp_path, monkeypatch, capsys, kind):
    path = _bad_paths(tmp_path)[kind]
    monkeypatch.setattr(
        "kiln.commands.burnin.burn_in", lambda *a, **k: pytest.fail("the campaign started")
    )
    code, out, err = run_cli(["burnin", str(EXAMPLE), "--skip-runtime", "-o", str(path)], capsys)
    _one_line(code, out, err, path)


def test_an_output_folder_is_made_and_tested_leaving_nothing(tmp_path):
    from kiln.commands import _output

    folder = tmp_path / "new" / "reports"
    _output.output_dir(folder)
    assert folder.is_dir() and list(folder.iterdir()) == []  # the write test left nothing


@pytest.mark.parametrize("kind", ["a folder under a file", "a filesystem nobody writes"])
def test_fabric_topology_output_unwritable_exits_3_before_ibnetdiscover(
    tmp_path, monkeypatch, capsys, kind
):
    path = _bad_paths(tmp_path)[kind] / "topology.conf"
    monkeypatch.setattr(
        "kiln.commands.fabric.run_ibnetdiscover", lambda *a: pytest.fail("ibnetdiscover ran")
    )
    argv = ["fabric", "topology", str(FABRIC / "inventory-3level"), "-o", str(path)]
    code, out, err = run_cli(argv, capsys)
    _one_line(code, out, err, path.parent)


def test_fabric_topology_output_that_is_a_folder_exits_3(tmp_path, capsys):
    source = str(FABRIC / "three_level_fat_tree.ibnetdiscover")
    argv = ["fabric", "topology", str(FABRIC / "inventory-3level"), "--from", source,
            "-o", str(tmp_path)]  # fmt: skip
    code, out, err = run_cli(argv, capsys)
    _one_line(code, out, err, tmp_path)
    assert "it is a folder" in err


def test_fabric_topology_output_to_a_good_path_still_writes(tmp_path, capsys):
    target = tmp_path / "made" / "topology.conf"
    source = str(FABRIC / "three_level_fat_tree.ibnetdiscover")
    argv = ["fabric", "topology", str(FABRIC / "inventory-3level"), "--from", source,
            "-o", str(target)]  # fmt: skip
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert target.read_text() == (FABRIC / "golden" / "topology-3level.conf").read_text()


@pytest.mark.parametrize("kind", ["a file where a folder belongs", "a folder under a file",
                                  "a filesystem nobody writes"])  # fmt: skip
def test_plan_output_unwritable_exits_3(tmp_path, capsys, kind):
    path = _bad_paths(tmp_path)[kind]
    code, out, err = run_cli(["plan", str(EXAMPLE), "-o", str(path)], capsys)
    _one_line(code, out, err, path)


def test_plan_output_that_fails_halfway_exits_3_naming_the_file(tmp_path, capsys):
    """A generated file's name taken by a folder (a write fails after the folder checked)."""
    (tmp_path / "out" / "slurm.conf").mkdir(parents=True)
    code, out, err = run_cli(["plan", str(EXAMPLE), "-o", str(tmp_path / "out")], capsys)
    _one_line(code, out, err, tmp_path / "out" / "slurm.conf")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only folder")
def test_plan_into_a_read_only_folder_of_files_already_up_to_date_is_fine(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(["plan", str(EXAMPLE), "-o", str(out)], capsys)[0] == 0
    out.chmod(0o500)
    try:
        code, _, err = run_cli(
            ["plan", str(EXAMPLE), "-o", str(out), "--detailed-exitcode"], capsys
        )
        assert code == 0, err
    finally:
        out.chmod(0o700)


@pytest.mark.local
def test_the_real_cli_output_paths_exit_3_with_one_line(tmp_path):
    """As a subprocess: what an operator or a pipeline sees."""
    (tmp_path / "a-file").write_text("x\n")
    bad = tmp_path / "a-file" / "out"
    env = {**os.environ, "KILN_HOME": str(tmp_path / "home")}
    commands = [
        ["plan", str(EXAMPLE), "-o", str(bad)],
        ["burnin", str(EXAMPLE), "--skip-runtime", "-o", str(bad)],
        ["fabric", "topology", str(FABRIC / "inventory-3level"), "-o", str(bad / "t.conf")],
    ]
    for argv in commands:
        proc = subprocess.run(
            [KILN, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )
        _one_line(proc.returncode, proc.stdout, proc.stderr, bad)
