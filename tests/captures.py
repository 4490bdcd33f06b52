"""Where the recorded real outputs of cluster tools live (tests/fixtures/real/README.md).

Two homes, each capture in one of them:

- SHARED_REAL, `../shared/fixtures/real` beside the checkout: the project's common recordings
  (CI has the same copy beside its clone). Tests read them there, through `shared_capture`.
- OURS, `tests/fixtures/real`: the captures kiln found through search, each with its source and
  licence in the folder's SOURCE.txt.

The one exception is MOLECULE_COPIES: shared captures that a molecule scenario copies into its
containers from inside the repository. They stay byte-identical to the shared file
(tests/unit/test_captures.py checks it); tests still read the shared one.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_REAL = REPO.parent / "shared" / "fixtures" / "real"
OURS = REPO / "tests" / "fixtures" / "real"

# copy inside the repository -> the shared capture it copies, and who needs the copy
MOLECULE_COPIES = {
    "tests/fixtures/real/nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml": (
        "nvidia-smi-q-x/a100_sxm4_80gb_mig_telegraf.xml",
        "molecule/nvidia/prepare.yml",
    ),
    "tests/fixtures/power/real/mc_info_hp_proliant_ilo.txt": (
        "ipmitool/mc_info_hp_proliant_ilo.txt",
        "molecule/power/prepare.yml",
    ),
}


def _require_shared() -> None:
    if not SHARED_REAL.is_dir():
        import pytest

        pytest.skip(
            f"the project's shared captures are not at {SHARED_REAL} (../shared/fixtures/real "
            "beside the checkout, as CI has it; see tests/fixtures/real/README.md)",
            allow_module_level=True,
        )


def shared_capture(relative: str) -> Path:
    """The shared capture `relative` (e.g. "ibstat/h100_cx7_some_eth_ports_down.txt").

    Without ../shared/fixtures/real the test is skipped, saying why; called at module level
    (a module constant), the whole module is. A missing file inside it is an error of the test.
    """
    _require_shared()
    path = SHARED_REAL / relative
    if not path.exists():
        raise FileNotFoundError(f"no shared capture {relative} in {SHARED_REAL}")
    return path


def real_captures(folder: str, pattern: str = "*") -> list[Path]:
    """Every real capture of one tool, ours and the shared ones (SOURCE.txt left out), by name."""
    _require_shared()
    found = {p.name: p for p in (OURS / folder).glob(pattern)}
    found.update((p.name, p) for p in (SHARED_REAL / folder).glob(pattern))
    return [found[name] for name in sorted(found) if name != "SOURCE.txt"]
