"""Report formats: JSON (versioned), JUnit XML, HTML with three inline SVG plots, the table,
and `kiln report RUN` re-rendering a stored run."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kiln.app import main
from kiln.burnin import judge_run
from kiln.inventory import require_valid
from kiln.records.burnin import save_report
from kiln.report import render

GPU8 = Path(__file__).parents[1] / "fixtures" / "burnin" / "gpu8"


@pytest.fixture(scope="module")
def report():
    return judge_run(GPU8 / "run", require_valid(GPU8 / "inventory"))


def test_json_is_versioned_and_complete(report):
    doc = json.loads(render(report, "json"))
    assert doc["kiln"] == "burnin-report" and doc["schema_version"] == 1
    assert doc["passed"] is False and doc["summary"]["failed"] == len(report.failures)
    assert doc["summary"]["drain"]["gpu003"].startswith("kiln: gemm gpu5 478 TFLOPS")
    first = doc["verdicts"][0]
    assert set(first) >= {
        "subject",
        "name",
        "check",
        "measured",
        "threshold",
        "passed",
        "severity",
        "action",
        "reason",
    }
    assert first["passed"] is False and first["severity"] == "critical"
    assert doc["gpu_tflops"]["gpu003"][5] == 478.0


def test_junit_has_a_testcase_per_node_and_check(report):
    root = ET.fromstring(render(report, "junit"))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {f"gpu{i:03d}" for i in range(1, 9)} | {"fabric"}
    total = failures = 0
    for suite in suites.values():
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        total += len(cases)
        failures += int(suite.get("failures"))
        for case in cases:
            assert case.get("classname") and case.get("name")
    assert int(root.get("tests")) == total and int(root.get("failures")) == failures
    gpu003 = {c.get("name"): c for c in suites["gpu003"].findall("testcase")}
    failure = gpu003["gemm_floor"].find("failure")
    assert failure.get("message") == "gemm gpu5 478 TFLOPS < floor 520"
    assert "gpu003/gpu5" in failure.text
    assert gpu003["checksum"].find("failure") is None


def test_html_is_self_contained_with_three_plots(report):
    html = render(report, "html")
    assert "<script" not in html and not re.search(r"(src|href)=\"https?:", html)
    assert "@import" not in html and "url(" not in html
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) == 3
    strip, lines, heat = svgs
    assert "plot-strip" in strip and len(re.findall(r'<circle class="pt', strip)) == 56
    assert 'data-name="gpu003/gpu5" data-v="478"' in strip and 'class="floor"' in strip
    assert "plot-lines" in lines and len(re.findall(r"<polyline", lines)) == 16
    assert "plot-heatmap" in heat and len(re.findall(r'<rect class="cell"', heat)) == 24
    assert html.index("Failing") < html.index("<svg")  # failing items first
    assert "gpu006/gpu2" in html


def test_table_lists_failures_first(report):
    text = render(report, "table", width=200)
    lines = [line for line in text.splitlines() if "FAIL" in line or " ok " in line]
    statuses = ["FAIL" in line for line in lines]
    assert statuses == sorted(statuses, reverse=True) and statuses[0]
    assert "gpu008" in text and "no result: job timed out or crashed" in text


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def test_kiln_report_rerenders_a_stored_run(tmp_path, capsys, report):
    run = tmp_path / "run"
    shutil.copytree(GPU8 / "run", run)
    code, _, err = run_cli(["report", str(run)], capsys)
    assert code == 2 and "no burn-in report" in err
    save_report(run, report)
    code, out, _ = run_cli(["report", str(run), "--json"], capsys)
    assert code == 1 and json.loads(out)["summary"]["failed"] == len(report.failures)
    target = tmp_path / "report.html"
    code, out, err = run_cli(["report", str(run), "-f", "html", "-o", str(target)], capsys)
    assert code == 1 and out == "" and target.read_text().count("<svg") == 3
    code, out, _ = run_cli(["report", str(run), "--format", "junit"], capsys)
    assert ET.fromstring(out).tag == "testsuites"
    code, out, _ = run_cli(["report", str(run), "--inventory", str(GPU8 / "inventory")], capsys)
    assert code == 1 and "gpu008" in out


def test_a_run_without_infiniband_says_so_in_every_format(report):
    assert json.loads(render(report, "json"))["infiniband"]["note"] == "no InfiniBand declared"
    root = ET.fromstring(render(report, "junit"))
    (case,) = [c for c in root.iter("testcase") if c.get("name") == "infiniband"]
    assert case.find("skipped").get("message") == "no InfiniBand declared"
    assert root.get("skipped") == "1"
    assert "InfiniBand: no InfiniBand declared" in render(report, "table", width=200)
    html = render(report, "html")
    assert "<h2>InfiniBand</h2>" in html and "no InfiniBand declared" in html
