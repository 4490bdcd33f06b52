"""kiln's layers, as docs/design.md draws them: no import runs upward or round in a circle.

The layer table in docs/design.md is the source: one row per package of cli/kiln with its band
and the kiln packages it may import. This test walks every import statement of cli/kiln (and of
the playbooks' plugins) and fails on an import the table does not allow, on a package the table
does not list, and on a cycle between packages.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cli" / "kiln"
DESIGN = ROOT / "docs" / "design.md"
BANDS = ("foundation", "core", "services", "use cases", "commands")
ROW = re.compile(r"^\|\s*`(?P<package>[\w.]+)`\s*\|\s*(?P<band>[a-z ]+?)\s*\|(?P<allowed>[^|]*)\|")
ANSIBLE_SIDE = ("filter_plugins", "strategy_plugins", "library")


def layer_table() -> dict[str, tuple[str, set[str]]]:
    """package -> (band, the kiln packages it may import), from docs/design.md."""
    text = DESIGN.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match and match["band"] in BANDS:
            allowed = set(re.findall(r"`([\w.]+)`", match["allowed"]))
            table[match["package"]] = (match["band"], allowed)
    return table


def package_of(module: str) -> str:
    """`kiln.runner.engine` -> `runner`; a module directly under kiln (`kiln.errors`) is its own
    package; `kiln` itself (its __init__) is `kiln`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kiln"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def kiln_imports(path: Path, module: str) -> set[str]:
    """The kiln modules `path` imports, relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.add(node.module)
    return {name for name in found if name == "kiln" or name.startswith("kiln.")}


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the modules that import it (for the message)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = package_of(module)
        graph.setdefault(source, {})
        for target in map(package_of, kiln_imports(path, module)):
            if target != source:
                graph[source].setdefault(target, []).append(module)
    return graph


def test_the_table_lists_every_package_once_with_a_known_band():
    table = layer_table()
    packages = set(package_graph())
    assert sorted(packages - set(table)) == [], "packages missing from docs/design.md's table"
    assert sorted(set(table) - packages) == [], "the table lists packages that do not exist"


def test_the_table_allows_no_import_upward():
    table = layer_table()
    upward = [
        f"{package} ({band}) may import {target} ({table[target][0]})"
        for package, (band, allowed) in table.items()
        for target in allowed
        if target in table and BANDS.index(table[target][0]) > BANDS.index(band)
    ]
    assert upward == []


def test_every_import_is_one_the_table_allows():
    table = layer_table()
    wrong = [
        f"{', '.join(modules)} imports kiln.{target}: {package} may import only "
        f"{', '.join(sorted(table[package][1])) or 'nothing of kiln'}"
        for package, targets in package_graph().items()
        for target, modules in targets.items()
        if package in table and target not in table[package][1]
    ]
    assert wrong == []


def test_no_cycle_between_packages():
    graph = {package: set(targets) for package, targets in package_graph().items()}
    cycles = []

    def visit(package: str, path: list[str]) -> None:
        for target in sorted(graph.get(package, ())):
            if target in path:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in done:
                visit(target, path + [target])
        done.add(package)

    done: set[str] = set()
    for package in sorted(graph):
        if package not in done:
            visit(package, [package])
    assert cycles == []


def test_the_ansible_side_imports_only_foundation_and_core():
    table = layer_table()
    low = {p for p, (band, _) in table.items() if band in ("foundation", "core")}
    wrong = []
    for folder in ANSIBLE_SIDE:
        for path in sorted((ROOT / "playbooks" / folder).glob("*.py")):
            for name in kiln_imports(path, f"playbooks.{folder}.{path.stem}"):
                if package_of(name) not in low:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_walk_sees_upward_imports(tmp_path):
    """The walker itself: a relative import resolves to the package it names."""
    nested = tmp_path / "kiln" / "plan"
    nested.mkdir(parents=True)
    path = nested / "build.py"
    path.write_text("from ..runner import engine\nfrom . import stages\nimport kiln.errors\n")
    assert kiln_imports(path, "kiln.plan.build") == {"kiln.runner", "kiln.plan", "kiln.errors"}


def test_no_module_is_over_400_lines():
    long = [
        f"{path.relative_to(ROOT)}: {count}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > 400
    ]
    assert long == []
