"""The bad-inventory corpus: `kiln validate` reports each mistake with file:line and key.

Every case under tests/fixtures/bad-inventories/<case>/ holds an Ansible inventory in
inventory/ and, beside it (never inside, where Ansible would read it as an inventory source),
expected.yml listing the findings it must produce.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kiln.app import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad-inventories"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yml").is_file())
REPO = Path(__file__).resolve().parents[2]

# `file:line: level [key]: message`, then `    fix: hint` lines.
FINDING = re.compile(
    r"^(?P<file>[^\s:]+)(?::(?P<line>\d+))?: (?P<level>error|warning)"
    r"(?: \[(?P<key>[^\]]+)\])?: (?P<message>.*)$"
)

CLEAN_HOSTS = """\
---
all:
  children:
    kiln_controllers:
      hosts:
        ctl01:
          ansible_host: 10.0.0.1
    kiln_compute:
      hosts:
        gpu[01:02]:
      vars:
        kiln_gpu_model: h100-sxm
"""


def run_kiln(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def parse_text(stderr: str) -> list[dict]:
    findings: list[dict] = []
    for line in stderr.splitlines():
        if line.startswith("    fix: ") and findings:
            findings[-1]["hint"] = line.removeprefix("    fix: ")
            continue
        match = FINDING.match(line)
        if match:
            finding = match.groupdict()
            finding["line"] = int(finding["line"] or 0)
            finding["hint"] = None
            findings.append(finding)
    return findings


def matches(expected: dict, found: dict) -> bool:
    return (
        found["file"] == expected["file"]
        and (found["line"] or 0) == expected["line"]
        and found["key"] == expected["key"]
        and found["level"] == expected.get("level", "error")
        and expected["message"] in found["message"]
        and (expected.get("hint") is None or expected["hint"] in (found["hint"] or ""))
    )


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every path under `directory` with its bytes (files), mtime and mode."""
    state = {}
    for path in sorted(directory.rglob("*")):
        stat = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        state[str(path.relative_to(directory))] = (data, stat.st_mtime_ns, stat.st_mode)
    return state


def load_expected(case: str) -> dict:
    return yaml.safe_load((CORPUS / case / "expected.yml").read_text())


def test_corpus_is_there():
    assert len(CASES) >= 20
    for case in CASES:
        assert (CORPUS / case / "inventory").is_dir(), case
        assert load_expected(case)["findings"], f"{case}: expected.yml lists no finding"


@pytest.mark.parametrize("case", CASES)
def test_case_reports_its_findings(case, capsys, tmp_path, monkeypatch):
    expected = load_expected(case)
    case_dir = CORPUS / case
    before = snapshot(case_dir)
    monkeypatch.chdir(tmp_path)  # anything written to the working directory would show here

    code, stdout, stderr = run_kiln(capsys, "validate", str(case_dir / "inventory"))

    assert code == expected["exit_code"] == 2, stderr
    found = parse_text(stderr)
    assert found, stderr
    for want in expected["findings"]:
        assert any(matches(want, got) for got in found), f"{case}: missing {want}\ngot:\n{stderr}"
    for unwanted in expected.get("absent", []):
        hits = [got for got in found if got["file"] == unwanted["file"]]
        assert not hits, f"{case}: unexpected findings in {unwanted['file']}: {hits}"
    errors = [got for got in found if got["level"] == "error"]
    assert f"{len(errors)} error(s)" in stderr
    assert "nothing was touched" in stderr
    assert stdout == ""  # no data on stdout for an invalid inventory
    # Nothing touched: the case's files are byte-for-byte and mtime-for-mtime as they were,
    # nothing was created beside them, and nothing in the working directory.
    assert snapshot(case_dir) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", CASES)
def test_case_json_document(case, capsys):
    expected = load_expected(case)
    code, stdout, _ = run_kiln(capsys, "validate", "--json", str(CORPUS / case / "inventory"))

    assert code == 2
    document = json.loads(stdout)
    assert document["kiln"] == "validate"
    assert document["schema_version"] == 1
    assert document["valid"] is False
    assert document["cluster"] is None
    assert document["inventory"] == str(CORPUS / case / "inventory")
    findings = document["findings"]
    assert document["errors"] == sum(f["level"] == "error" for f in findings) >= 1
    assert document["warnings"] == sum(f["level"] == "warning" for f in findings)
    for finding in findings:
        assert set(finding) == {"level", "file", "line", "key", "message", "hint", "hosts"}
        assert finding["level"] in ("error", "warning")
        assert isinstance(finding["hosts"], list)
    for want in expected["findings"]:
        assert any(matches(want, got) for got in findings), f"{case}: missing {want} in JSON"


def test_many_mistakes_reported_in_one_run(capsys):
    """Every mistake of the inventory at once: none hides another."""
    expected = load_expected("many-mistakes")
    _, _, stderr = run_kiln(capsys, "validate", str(CORPUS / "many-mistakes" / "inventory"))
    found = parse_text(stderr)
    assert len(expected["findings"]) >= 12
    assert all(any(matches(w, g) for g in found) for w in expected["findings"])
    assert len({(f["file"], f["line"], f["key"]) for f in found}) >= len(expected["findings"])


def test_unknown_gpu_model_folds_hosts(capsys):
    """A bad value in group vars is one finding listing the hosts it reaches, not one per host."""
    code, stdout, _ = run_kiln(
        capsys, "validate", "--json", str(CORPUS / "unknown-gpu-model" / "inventory")
    )
    assert code == 2
    (finding,) = [f for f in json.loads(stdout)["findings"] if f["key"] == "kiln_gpu_model"]
    assert sorted(finding["hosts"]) == ["gpu01", "gpu02"]
    assert finding["hint"] == "did you mean 'h100-sxm'?"


def test_vault_value_accepted(capsys):
    code, stdout, _ = run_kiln(
        capsys, "validate", "--json", str(CORPUS / "plaintext-secrets" / "inventory")
    )
    assert code == 2
    keys = {(f["file"], f["key"]) for f in json.loads(stdout)["findings"]}
    assert ("host_vars/gpu01.yml", "kiln_bmc_password") in keys
    assert not any(file == "host_vars/gpu02.yml" for file, _ in keys)


def test_secrets_are_never_printed(capsys):
    _, stdout, stderr = run_kiln(
        capsys, "validate", str(CORPUS / "plaintext-secrets" / "inventory")
    )
    for secret in ("hunter2", "c2VjcmV0LW11bmdlLWtleQ==", "$ANSIBLE_VAULT"):
        assert secret not in stdout + stderr


def test_missing_directory(capsys, tmp_path):
    missing = tmp_path / "no-such-inventory"
    code, stdout, stderr = run_kiln(capsys, "validate", str(missing))
    assert code == 2
    assert "does not exist" in stderr
    assert not missing.exists()
    code, stdout, _ = run_kiln(capsys, "validate", "--json", str(missing))
    assert code == 2
    (finding,) = json.loads(stdout)["findings"]
    assert "does not exist" in finding["message"]


def test_unreadable_file(capsys, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file; the non-utf8-file case covers unreadable input")
    (tmp_path / "hosts.yml").write_text(CLEAN_HOSTS)
    vars_file = tmp_path / "group_vars" / "kiln_compute.yml"
    vars_file.parent.mkdir()
    vars_file.write_text("kiln_rack: r1\n")
    vars_file.chmod(0)
    try:
        code, _, stderr = run_kiln(capsys, "validate", str(tmp_path))
    finally:
        vars_file.chmod(0o644)
    assert code == 2
    assert "group_vars/kiln_compute.yml: error: cannot read: Permission denied" in stderr


def test_clean_inventory_exits_zero(capsys, tmp_path):
    """The control: the same shape without a mistake validates, so the cases fail for theirs."""
    (tmp_path / "hosts.yml").write_text(CLEAN_HOSTS)
    code, stdout, stderr = run_kiln(capsys, "validate", str(tmp_path))
    assert code == 0, stderr
    assert "1 controller(s), 2 compute nodes, 16 GPUs" in stdout
    code, stdout, _ = run_kiln(capsys, "validate", "--json", str(tmp_path))
    assert code == 0
    document = json.loads(stdout)
    assert document["valid"] is True and document["findings"] == []
    assert document["cluster"]["controllers"] == ["ctl01"]
    assert document["cluster"]["gpus"] == 16


@pytest.mark.parametrize("case", ["versions-cuda-too-new", "ini-inventory"])
def test_case_fixed_validates(case, capsys, tmp_path):
    """Correcting the one mistake of a case makes it valid: the finding was the only problem."""
    inventory = tmp_path / "inventory"
    shutil.copytree(CORPUS / case / "inventory", inventory)
    if case == "versions-cuda-too-new":
        path = inventory / "group_vars" / "all.yml"
        path.write_text(path.read_text().replace("driver_branch: 535", "driver_branch: 570"))
    else:
        path = inventory / "hosts"
        text = path.read_text().replace("gpu_02", "gpu02").replace("l40x", "h100-sxm")
        path.write_text(text.replace('kiln_gpu_count="8"', "kiln_gpu_count=8"))
    code, _, stderr = run_kiln(capsys, "validate", str(inventory))
    assert code == 0, stderr


def test_example_inventory_is_clean(capsys):
    example = REPO / "inventories" / "example-h100"
    if not example.is_dir():
        pytest.skip("inventories/example-h100 is not there yet")
    code, _, stderr = run_kiln(capsys, "validate", str(example))
    assert code == 0, stderr
