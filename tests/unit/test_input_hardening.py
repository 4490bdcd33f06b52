"""Input hardening (issue 18): outside text is data, expansions are bounded, typos are errors,
state and output paths fail with a line, malformed records name their file, XML stays
well-formed, CSV errors are the parser's own."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kiln.app import main
from kiln.console import clean, safe
from kiln.errors import EnvironmentProblem, ExitCode, InvalidInputError
from kiln.inventory import load_cluster, require_valid
from kiln.inventory.hostranges import HostRangeError, count_host_range, expand_host_range
from kiln.parsers import ParseError
from kiln.parsers.nvidia_smi_query import parse_query_gpu_csv
from kiln.plan.hostpattern import check_patterns
from kiln.records import runs
from kiln.records.burnin import load_run, save_report
from kiln.render.hostlist import HostlistError, expand

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example-h100"
GPU8 = ROOT / "tests" / "fixtures" / "burnin" / "gpu8"
NASTY = "mkfs: [/dev/sda] busy [bold]x[/] \x1b[31mred\x1b[0m\x07\x00\x1b]0;title\x07 end"


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


# --- text from nodes, tools and files is data --------------------------------------------------


def test_clean_removes_escape_sequences_and_shows_other_controls():
    assert clean(NASTY) == "mkfs: [/dev/sda] busy [bold]x[/] red\\x07\\x00 end"
    assert clean("a\r\nb\tc\n") == "a\nb\tc\n"
    assert safe("[/dev/sda]") == "\\[/dev/sda]"


def test_validate_prints_file_contents_as_data(tmp_path, capsys):
    inventory = tmp_path / "inv"
    shutil.copytree(EXAMPLE, inventory)
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("gpu001:", '"gpu[/dev/sda]":', 1))
    code, _, err = run_cli(["validate", str(inventory)], capsys)
    assert code == ExitCode.INVALID_INPUT
    assert "host name 'gpu[/dev/sda]' is not a valid RFC 1123 label" in err


@pytest.fixture(scope="module")
def nasty_report():
    from kiln.burnin import judge_run

    report = copy.deepcopy(judge_run(GPU8 / "run", require_valid(GPU8 / "inventory")))
    failing = next(i for i, v in enumerate(report.verdicts) if not v.passed)
    report.verdicts[failing] = report.verdicts[failing]._replace(message=NASTY)
    return report


def test_junit_with_control_characters_is_well_formed_xml(nasty_report):
    from kiln.report import render

    root = ET.fromstring(render(nasty_report, "junit"))
    messages = [f.get("message") for f in root.iter("failure")]
    assert "mkfs: [/dev/sda] busy [bold]x[/] red\\x07\\x00 end" in messages


def test_html_and_table_carry_no_control_characters_and_no_markup(nasty_report):
    from kiln.report import render

    html = render(nasty_report, "html")
    assert "\x1b" not in html and "\x00" not in html and "\x07" not in html
    assert "mkfs: [/dev/sda] busy [bold]x[/] red\\x07\\x00 end" in html
    table = render(nasty_report, "table", width=400)
    assert "[/dev/sda] busy [bold]x[/] red" in table and "\x1b" not in table


# --- bounds: expansions refused before allocating ----------------------------------------------


def test_a_huge_ansible_host_range_is_refused_before_expanding():
    assert count_host_range("rack[a:d]-node[01:08]") == 32
    start = time.monotonic()
    with pytest.raises(HostRangeError, match="10,000,000 names"):
        expand_host_range("gpu[0:9999999]")
    assert time.monotonic() - start < 0.5


def test_a_huge_slurm_hostlist_is_refused_before_expanding():
    with pytest.raises(HostlistError, match="more than 1,000,000"):
        expand("gpu[0-999]x[0-9999]")
    assert len(expand("gpu[0001-1000],n[1-3]")) == 1003


def test_a_huge_range_in_an_inventory_is_a_finding(tmp_path):
    inventory = tmp_path / "inv"
    shutil.copytree(EXAMPLE, inventory)
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("gpu001:", '"gpu[0:9999999]":', 1))
    result = load_cluster(inventory)
    assert not result.ok
    assert any("expands to 10,000,000 names" in f.message for f in result.errors)


def test_a_huge_nodes_selector_exits_2(capsys):
    code, out, err = run_cli(["inspect", str(EXAMPLE), "gpu[0-9999999]"], capsys)
    assert code == ExitCode.INVALID_INPUT and out == ""
    assert "expands to 10,000,000 names" in err


# --- every --limit term must match something ---------------------------------------------------


def test_a_limit_term_matching_nothing_is_an_error_naming_it():
    cluster = require_valid(EXAMPLE)
    check_patterns("kiln_compute:!gpu001", cluster.nodes, cluster.groups)
    check_patterns("gpu0*,&kiln_compute,~gpu00[1-3]", cluster.nodes, cluster.groups)
    with pytest.raises(InvalidInputError) as raised:
        check_patterns("kiln_compute:!gpu0001", cluster.nodes, cluster.groups)
    assert "'!gpu0001' matches no host or group" in raised.value.message
    with pytest.raises(InvalidInputError, match="'kiln_compte', '&gpux' match no host"):
        check_patterns("kiln_compte,&gpux,gpu001", cluster.nodes, cluster.groups)
    with pytest.raises(InvalidInputError, match="not a valid regex"):
        check_patterns("~gpu[", cluster.nodes, cluster.groups)


def test_provision_with_a_typo_in_an_exclusion_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "state"))
    argv = ["provision", str(EXAMPLE), "--limit", "kiln_compute:!gpu0001", "--yes"]
    code, _, err = run_cli(argv, capsys)
    assert code == ExitCode.INVALID_INPUT and "'!gpu0001'" in err
    assert not (tmp_path / "state").exists()


# --- state and output paths ---------------------------------------------------------------------


def test_an_unwritable_state_dir_is_exit_3_naming_it(tmp_path):
    (tmp_path / "file").write_text("not a directory\n")
    state = tmp_path / "file" / "state"
    with pytest.raises(EnvironmentProblem) as raised:
        runs.ensure_writable(state)
    assert str(state) in raised.value.message and raised.value.exit_code == 3
    runs.ensure_writable(tmp_path / "fine")


def test_a_summary_that_cannot_be_written_is_exit_3_naming_it(tmp_path, monkeypatch):
    record = runs.RunRecord.create(tmp_path / "state", "20260101T000000Z-aaaaaa")

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(EnvironmentProblem, match="No space left on device") as raised:
        record.write_summary({"failed_hosts": []})
    assert str(record.path / "summary.json.tmp") in raised.value.message


def test_report_to_a_bad_path_is_exit_3_with_a_line(tmp_path, capsys, nasty_report):
    run = tmp_path / "run"
    shutil.copytree(GPU8 / "run", run)
    save_report(run, nasty_report)
    target = tmp_path / "no" / "such" / "dir" / "report.xml"
    code, out, err = run_cli(["report", str(run), "-f", "junit", "-o", str(target)], capsys)
    assert code == ExitCode.ENVIRONMENT and out == ""
    assert err.startswith(f"error: cannot write {target}") and "Traceback" not in err


# --- malformed records name their file ----------------------------------------------------------


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"nodes": "gpu001"}'])
def test_a_malformed_burnin_manifest_is_an_error_naming_it(tmp_path, text):
    run = tmp_path / "run"
    shutil.copytree(GPU8 / "run", run)
    (run / "run.json").write_text(text)
    with pytest.raises(InvalidInputError, match=str(run / "run.json")):
        load_run(run)


@pytest.mark.parametrize("text", ["{not json", "[]"])
def test_a_malformed_run_summary_is_an_error_naming_it(tmp_path, text):
    state = tmp_path / "state"
    record = runs.RunRecord.create(state, "20260101T000000Z-aaaaaa")
    record.summary_path.write_text(text)
    with pytest.raises(InvalidInputError, match=str(record.summary_path)):
        runs.provisioned_hosts(EXAMPLE, state)
    with pytest.raises(InvalidInputError, match=str(record.summary_path)):
        runs.last_run_with(EXAMPLE, "preflight", state)


def test_a_csv_reader_error_is_the_parsers_own_error_with_the_line():
    text = "index, name\n0, NVIDIA H100\r1, NVIDIA H100\n"
    with pytest.raises(ParseError) as raised:
        parse_query_gpu_csv(text)
    assert "not CSV" in str(raised.value) and "line 2" in str(raised.value)


# --- the real CLI: exit codes, one line, no traceback -------------------------------------------


def _kiln(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "NO_COLOR": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "kiln", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        cwd=ROOT,
    )


def _one_error(proc: subprocess.CompletedProcess, code: int, says: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and says in lines[0], lines
    assert all(line.startswith("  hint: ") for line in lines[1:]), lines


@pytest.mark.local
def test_the_real_cli_exit_codes_for_bad_input(tmp_path):
    state = tmp_path / "state"
    _one_error(_kiln(["inspect", str(EXAMPLE), "gpu[0-9999999]"]), 2, "10,000,000 names")
    limit = ["provision", str(EXAMPLE), "--limit", "kiln_compute:!gpu0001", "--yes"]
    _one_error(_kiln(limit, KILN_HOME=str(state)), 2, "'!gpu0001'")
    (tmp_path / "file").write_text("x\n")
    bad_home = tmp_path / "file" / "state"
    _one_error(
        _kiln(["provision", str(EXAMPLE), "--yes"], KILN_HOME=str(bad_home)), 3, str(bad_home)
    )
    run = tmp_path / "run"
    shutil.copytree(GPU8 / "run", run)
    (run / "run.json").write_text("{not json")
    inventory = str(GPU8 / "inventory")
    _one_error(_kiln(["report", str(run), "--inventory", inventory]), 2, "run.json")
    shutil.copy2(GPU8 / "run" / "run.json", run / "run.json")
    assert _kiln(["report", str(run), "--inventory", inventory]).returncode == 1  # stored
    bad = ["report", str(run), "-f", "junit", "-o", "/nonexistent/x/r.xml"]
    _one_error(_kiln(bad), 3, "cannot write /nonexistent/x/r.xml")
