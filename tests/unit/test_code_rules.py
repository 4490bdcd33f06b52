"""Two rules of kiln's code (issue #29), checked over every module of cli/kiln with `ast`.

1. No private import across modules. A name with a leading underscore (`_judge`, `_WIDTH`) is
   its module's own: no other module imports it (`from kiln.x import _name`) or reaches it as
   an attribute (`x._name`, `kiln.x._name`). A private *module* (`kiln/parsers/_common.py`) is
   its package's own: the modules of that package (and the packages inside it) may import it
   and its public names; a module of another package may not (it asks the package's public
   face instead). Dunder names (`__version__`) and a NamedTuple's API (`_make`) are not
   private.

2. One vocabulary of a host's result in a stage: kiln.records.status.HostStatus. Outside that
   module, the words only that vocabulary uses (`not_run`, `aborted`) never appear as bare
   strings, and no literal tuple, list, set or dict spells two or more of its words and nothing
   else (a second GOOD, BAD or RANK). A collection with other words beside them is another
   vocabulary (Ansible's recap counters: ok, changed, failures, dark, ...; a stage's status:
   successful, failed, canceled, ...) and stays. The one enum that uses some of the words with
   another meaning, a command's outcome over SSH, is kiln.fleet.CommandOutcome.

ALLOWED lists the exceptions that exist today, each with its reason; an entry that no longer
matches anything fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from kiln.records.status import HostStatus

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cli" / "kiln"
STATUS_MODULE = "kiln.records.status"
ONLY_HOST_STATUS = {HostStatus.NOT_RUN.value, HostStatus.ABORTED.value}
WORDS = {status.value for status in HostStatus}

HEALTH_READS_FLEET = (
    "kiln.fleet.CommandOutcome's words (a command's outcome over SSH, not a host's result): "
    "health is core and may not import fleet"
)
ALLOWED: dict[str, str] = {
    # a finding, as the checks below spell it: why it stays for now
    "kiln.health.results: second host-status vocabulary": HEALTH_READS_FLEET,
}


def modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path, ast.parse(path.read_text(), str(path))


# A NamedTuple's own methods start with an underscore so as not to clash with its fields; they
# are its public API (collections.namedtuple's documentation).
NAMEDTUPLE_API = {"_make", "_replace", "_asdict", "_fields", "_field_defaults"}


def private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__") and part not in NAMEDTUPLE_API


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def import_findings(module: str, path: Path, tree: ast.Module) -> Iterator[str]:
    """Rule 1 for one module."""
    package = package_of(module, path)

    def crossing(target: str) -> str | None:
        """The first private part of dotted `target` that `module` may not reach, if any."""
        parts = target.split(".")
        for index, part in enumerate(parts):
            if not private(part):
                continue
            owner = ".".join(parts[:index])  # the module or package that holds `part`
            is_module = (PACKAGE.parent / Path(*parts[: index + 1])).with_suffix(".py").is_file()
            if is_module and (package == owner or package.startswith(owner + ".")):
                continue  # a private module, from inside its package
            if not is_module and owner == module:
                continue  # the module's own private name
            return ".".join(parts[: index + 1])
        return None

    imported: dict[str, str] = {}  # local name -> the kiln module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "kiln":
                continue
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if (bad := crossing(target)) is not None:
                    yield f"{module}: imports {bad}"
                imported[alias.asname or alias.name] = target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kiln":
                    if (bad := crossing(alias.name)) is not None:
                        yield f"{module}: imports {bad}"
                    bound = alias.asname or "kiln"  # `import kiln.x` binds `kiln`
                    imported[bound] = alias.name if alias.asname else "kiln"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in imported:
                target = ".".join([imported[value.id], *reversed(chain)])
                if (bad := crossing(target)) is not None:
                    yield f"{module}: reaches {bad}"


def vocabulary_findings(module: str, tree: ast.Module) -> Iterator[str]:
    """Rule 2 for one module."""
    if module == STATUS_MODULE:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in ONLY_HOST_STATUS:
            yield f"{module}: host-status word {node.value!r}"
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [key for key in node.keys if key is not None]
        else:
            continue
        words = [i.value for i in items if isinstance(i, ast.Constant)]
        if len(words) == len(items) and len(set(words) & WORDS) >= 2 and set(words) <= WORDS:
            yield f"{module}: second host-status vocabulary"  # no line: others edit modules


def findings() -> list[str]:
    found: list[str] = []
    for module, path, tree in modules():
        found += import_findings(module, path, tree)
        found += vocabulary_findings(module, tree)
    return sorted(set(found))


def test_no_private_import_across_modules_and_one_host_status_vocabulary():
    found = findings()
    new = [f for f in found if f not in ALLOWED]
    assert not new, "\n".join(new)
    gone = [entry for entry in ALLOWED if entry not in found]
    assert not gone, f"no longer found; take them off ALLOWED: {gone}"


def test_the_rules_catch_what_they_are_meant_to(tmp_path):
    source = """
from kiln.judging._rules import DRAIN
from kiln.runner.merge import _not_run
from kiln.fleet import execute
import kiln.records.runs as runs
GOOD = ("ok", "changed")
COUNTS = {"ok": 0, "failures": 0, "dark": 0}
x = execute._run_one
y = runs._private
z = "not_run"
"""
    tree = ast.parse(source)
    path = PACKAGE / "fabric" / "example.py"
    assert sorted(import_findings("kiln.fabric.example", path, tree)) == [
        "kiln.fabric.example: imports kiln.judging._rules",
        "kiln.fabric.example: imports kiln.runner.merge._not_run",
        "kiln.fabric.example: reaches kiln.fleet.execute._run_one",
        "kiln.fabric.example: reaches kiln.records.runs._private",
    ]
    assert sorted(vocabulary_findings("kiln.fabric.example", tree)) == [
        "kiln.fabric.example: host-status word 'not_run'",
        "kiln.fabric.example: second host-status vocabulary",
    ]
    inside = PACKAGE / "judging" / "example.py"
    assert not list(import_findings("kiln.judging.example", inside, ast.parse(source[:40])))
