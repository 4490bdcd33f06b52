"""A fresh machine installs exactly what CI tested: every dependency kiln names is pinned."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    found = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            found[canonical(name)] = version
    return found


def test_every_dependency_and_dev_tool_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    pinned = pins()
    missing = [req for req in wanted if canonical(NAME.match(req)[1]) not in pinned]
    assert missing == []


def test_make_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs)


# --- the Ansible range against what kiln's strategy plugins import ---------------------------

STRATEGY = [ROOT / "cli" / "kiln" / "strategy", ROOT / "playbooks" / "strategy_plugins"]
# The first ansible-core series that has each private module the strategy imports (a module of
# ansible._internal moves or goes in any minor release: the range stops at the tested series).
INTERNAL_SINCE = {"ansible._internal": (2, 19)}
# The ansible-core series each `ansible` bundle major carries (its release notes).
CORE_OF_BUNDLE = {9: (2, 16), 10: (2, 17), 11: (2, 18), 12: (2, 19), 13: (2, 20)}


def _requirement(name: str):
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"] if canonical(NAME.match(r)[1]) == name]
    assert len(found) == 1, f"pyproject.toml names {name} {len(found)} times"
    return found[0].specifier


def _ansible_imports() -> set[str]:
    import ast

    modules = set()
    for folder in STRATEGY:
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible."):
                    modules.add(node.module)
                elif isinstance(node, ast.Import):
                    modules |= {a.name for a in node.names if a.name.startswith("ansible.")}
    return modules


def _series(specifier, series: tuple[int, int]) -> bool:
    """Whether `specifier` admits any release of a major.minor series."""
    major, minor = series
    return any(f"{major}.{minor}.{patch}" in specifier for patch in (0, 1, 5, 20, 99))


def test_the_ansible_core_range_is_what_the_strategy_plugins_can_load():
    imports = _ansible_imports()
    internal = {m for m in imports if m.startswith("ansible._internal")}
    assert internal, "the strategy no longer imports ansible._internal: revisit this range"
    needed = INTERNAL_SINCE["ansible._internal"]
    core = _requirement("ansible-core")
    tested = tuple(int(n) for n in pins()["ansible-core"].split(".")[:2])
    assert pins()["ansible-core"] in core  # the tested version is inside the range
    older = [(2, minor) for minor in range(14, needed[1])]
    assert not any(_series(core, s) for s in older), "admits a core without ansible._internal"
    assert not _series(core, (tested[0], tested[1] + 1)), "admits an untested core series"


def test_the_ansible_bundle_range_carries_only_cores_in_that_range():
    bundle, core = _requirement("ansible"), _requirement("ansible-core")
    admitted = [major for major in CORE_OF_BUNDLE if f"{major}.0.0" in bundle]
    assert pins()["ansible"] in bundle and admitted
    for major in admitted:
        assert _series(core, CORE_OF_BUNDLE[major]), f"ansible {major} carries another core"
    assert f"{max(CORE_OF_BUNDLE) + 1}.0.0" not in bundle  # no open upper end


def test_the_installed_core_has_every_module_the_strategy_imports():
    import importlib.util

    missing = [m for m in sorted(_ansible_imports()) if importlib.util.find_spec(m) is None]
    assert missing == []
