"""One home for each real capture (tests/captures.py, tests/fixtures/real/README.md): the shared
recordings are read from ../shared/fixtures/real, and the repository holds no copy of them but
the ones a molecule scenario copies into its containers, which stay byte-identical."""

import hashlib
from pathlib import Path

import pytest

import captures
from captures import MOLECULE_COPIES, REPO, SHARED_REAL, real_captures, shared_capture


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_the_repository_holds_no_copy_of_a_shared_capture_but_molecules():
    shared = {_digest(p): p.relative_to(SHARED_REAL) for p in _files(shared_capture("."))}
    copies = {
        str(p.relative_to(REPO)): str(shared[_digest(p)])
        for root in (REPO / "tests" / "fixtures", REPO / "molecule")
        for p in _files(root)
        if _digest(p) in shared
    }
    assert copies == {copy: of for copy, (of, _) in MOLECULE_COPIES.items()}


@pytest.mark.parametrize("copy", sorted(MOLECULE_COPIES))
def test_each_molecule_copy_is_named_by_its_scenario(copy):
    of, scenario = MOLECULE_COPIES[copy]
    assert (REPO / copy).read_bytes() == shared_capture(of).read_bytes()
    assert Path(copy).name in (REPO / scenario).read_text()


def test_real_captures_are_ours_and_the_shared_ones_each_once():
    names = [p.name for p in real_captures("nvidia-smi-q-x", "*.xml")]
    assert names == sorted(set(names)) and "SOURCE.txt" not in names
    assert {p.parent for p in real_captures("nvidia-smi-q-x", "*.xml")} == {
        REPO / "tests/fixtures/real/nvidia-smi-q-x",
        SHARED_REAL / "nvidia-smi-q-x",
    }
    # the molecule copy counts once, read from its shared home
    assert SHARED_REAL / "nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml" in real_captures(
        "nvidia-smi-q-x", "*.xml"
    )


def test_a_missing_shared_folder_skips_saying_where_it_was_looked_for(monkeypatch, tmp_path):
    monkeypatch.setattr(captures, "SHARED_REAL", tmp_path / "absent")
    with pytest.raises(pytest.skip.Exception, match="shared captures are not at .*absent"):
        shared_capture("ibstat/h100_cx7_some_eth_ports_down.txt")
    with pytest.raises(pytest.skip.Exception):
        real_captures("ibstat")


def test_a_missing_shared_file_is_an_error_not_a_skip():
    with pytest.raises(FileNotFoundError, match="no shared capture ibstat/renamed.txt"):
        shared_capture("ibstat/renamed.txt")
