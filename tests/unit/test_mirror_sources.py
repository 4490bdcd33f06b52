"""Every download source kiln's roles and version tables name goes through the mirror rule
(#30): with kiln_mirror.url set, the value a node uses is <url>/<host>/<path> of the upstream
source (kiln.mirror.layout), through the roles' kiln_mirrored filter.

The scan below reads every URL literal of the roles (defaults, vars, tasks, handlers,
templates) and of kiln's version tables (cli/kiln/profiles, YAML and Python): a role's literal
must be inside a kiln_mirrored call (or a comment, or the node itself: 127.0.0.1); a table's
must be one of TABLE_SOURCES, each named with the role variable that passes it through
kiln_mirrored (checked by rendering it for every table entry), or of NOT_FETCHED, with why. A
role or table that adds a hard-coded source fails here.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from jinja2 import Environment, StrictUndefined, Undefined, nodes

from kiln.mirror.filters import mirrored_filter
from kiln.mirror.layout import in_mirror
from kiln.profiles import load_compat, load_profiles
from kiln.profiles.platforms import load_platforms
from role_defaults import render_role_defaults

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "playbooks" / "roles"
PROFILES = ROOT / "cli" / "kiln" / "profiles"
ROLE_PARTS = ("defaults", "vars", "tasks", "handlers", "templates")
URL = re.compile(r"https?://([^/:\s'\"{}()]+)[^\s'\"{}()]*")
NODE_ITSELF = ("127.0.0.1", "localhost", "[::1]")
MIRROR = {"url": "http://mirror.example:8080/kiln", "offline": True}

# A table's URL, by file and field (fnmatch over the dotted path; a Python module's constant by
# name) -> (role, the default that passes it through kiln_mirrored).
TABLE_SOURCES = {
    ("platforms.py", "REPOSITORY_ROOT"): ("nvidia_repo", "nvidia_repo_url"),
    ("compat.yml", "burnin_runtimes.*.index_url"): ("burnin", "burnin_pip_index_url"),
}
# A table's URL that nothing fetches, with why.
NOT_FETCHED = {
    ("slurm.yml", "distribution.*.source"): "provenance: where the version a release ships was "
    "read (packages.debian.org, ...); no role or command fetches it",
}


# -- the scan ---------------------------------------------------------------------------------


def _urls(text: str) -> list[str]:
    return [m.group(0) for m in URL.finditer(text) if m.group(1) not in NODE_ITSELF]


def _jinja_unrouted(template: str, comments: bool = False) -> list[str]:
    """The URLs of a Jinja template that reach its output without kiln_mirrored: in its text
    (outside comment lines when `comments`) or in a string constant that is not the value a
    kiln_mirrored filter is applied to."""
    found: list[str] = []

    def walk(node: nodes.Node, routed: bool) -> None:
        if isinstance(node, nodes.TemplateData):
            lines = node.data.splitlines()
            kept = [ln for ln in lines if not (comments and ln.lstrip().startswith(("#", ";")))]
            found.extend(url for line in kept for url in _urls(line))
        elif isinstance(node, nodes.Const) and isinstance(node.value, str) and not routed:
            found.extend(_urls(node.value))
        elif isinstance(node, nodes.Filter) and node.name == "kiln_mirrored":
            if node.node is not None:
                walk(node.node, True)
            for arg in [*node.args, *node.kwargs]:
                walk(arg, False)
            return
        for child in node.iter_child_nodes():
            walk(child, routed)

    walk(Environment().parse(template), False)
    return found


def _strings(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, string) of every string in a YAML document, keys included."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield path, str(key)
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}.{index}" if path else str(index))


def role_unrouted(roles: Path) -> list[str]:
    """'file: URL' for each source a role names outside kiln_mirrored."""
    found = []
    for part in ROLE_PARTS:
        for path in sorted(roles.glob(f"*/{part}/**/*")):
            if path.suffix in (".yml", ".yaml"):
                texts = [t for _, t in _strings(yaml.safe_load(path.read_text()))]
                urls = [u for t in texts for u in _jinja_unrouted(t)]
            elif path.suffix == ".j2":
                urls = _jinja_unrouted(path.read_text(), comments=True)
            else:
                continue
            found.extend(f"{path.relative_to(roles)}: {url}" for url in urls)
    return found


def table_urls(profiles: Path) -> Iterator[tuple[str, str, str]]:
    """(file, field, URL) of every URL in the version tables: a YAML field by its dotted path,
    a Python string by the name it is assigned to (docstrings and comments are documentation)."""
    for path in sorted(profiles.glob("*.yml")):
        for field, text in _strings(yaml.safe_load(path.read_text())):
            for url in _urls(text):
                yield path.name, field, url
    for path in sorted(profiles.glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        }
        names = {
            id(n.value): n.targets[0].id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docstrings:
                    continue
                field = names.get(id(node), f"line {node.lineno}")
                for url in _urls(node.value):
                    yield path.name, field, url


def table_unrouted(profiles: Path) -> list[str]:
    """'file field: URL' for each table URL that is neither a routed source nor documented."""
    known = [*TABLE_SOURCES, *NOT_FETCHED]
    return [
        f"{name} {field}: {url}"
        for name, field, url in table_urls(profiles)
        if not any(name == n and fnmatch.fnmatchcase(field, p) for n, p in known)
    ]


# Jinja's lexer decodes a string constant's backslashes (the roles' regexes) and warns.
@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
def test_no_role_or_table_names_a_source_outside_the_mirror_rule():
    assert role_unrouted(ROLES) == []
    assert table_unrouted(PROFILES) == []


def test_every_listed_table_source_is_still_there():
    """A stale entry would let a new URL of the same name through unnoticed."""
    seen = {
        (name, p)
        for name, field, _ in table_urls(PROFILES)
        for n, p in TABLE_SOURCES
        if n == name and fnmatch.fnmatchcase(field, p)
    }
    assert seen == set(TABLE_SOURCES)


def test_the_scan_catches_a_hard_coded_source(tmp_path):
    roles, profiles = tmp_path / "roles", tmp_path / "profiles"
    for part in ("defaults", "tasks", "templates"):
        (roles / "new" / part).mkdir(parents=True)
    (roles / "new" / "defaults" / "main.yml").write_text(
        "# docs: https://example.org/docs are fine in a comment\n"
        "new_url: https://example.org/a.tar.gz\n"
        "new_ok_url: \"{{ ('https://example.org/v' ~ v) | kiln_mirrored(kiln_mirror) }}\"\n"
        "new_bare_url: \"{{ 'https://example.org/b' }}\"\n"
        "new_after_url: \"{{ 'https://example.org/c' | kiln_mirrored(m) | replace('x', "
        "'https://example.org/d') }}\"\n"
    )
    (roles / "new" / "tasks" / "main.yml").write_text(
        "- ansible.builtin.get_url: {url: 'https://example.org/e.sh', dest: /tmp/e}\n"
        "- ansible.builtin.uri: {url: 'http://127.0.0.1:{{ port }}/metrics'}\n"
    )
    (roles / "new" / "templates" / "new.conf.j2").write_text(
        "# see https://example.org/manual\nsource = https://example.org/f\n"
    )
    assert sorted(role_unrouted(roles)) == [
        "new/defaults/main.yml: https://example.org/a.tar.gz",
        "new/defaults/main.yml: https://example.org/b",
        "new/defaults/main.yml: https://example.org/d",
        "new/tasks/main.yml: https://example.org/e.sh",
        "new/templates/new.conf.j2: https://example.org/f",
    ]
    profiles.mkdir()
    (profiles / "compat.yml").write_text(
        "burnin_runtimes: {a: {index_url: https://pypi.example/simple}}\n"
        "new_table: {x: {url: https://example.org/g}}\n"
    )
    (profiles / "new.py").write_text(
        '"""Docs: https://example.org/h."""\nROOT = "https://example.org/i"  # new\n'
    )
    assert table_unrouted(profiles) == [
        "compat.yml new_table.x.url: https://example.org/g",
        "new.py ROOT: https://example.org/i",
    ]


# -- the filter and the values the roles use --------------------------------------------------

NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz"


@pytest.mark.parametrize(
    "mirror", [None, {}, {"url": None, "offline": False}, Undefined(), StrictUndefined()]
)
def test_without_a_mirror_url_the_filter_leaves_the_source_alone(mirror):
    assert mirrored_filter(NCCL_TESTS, mirror) == NCCL_TESTS


@pytest.mark.parametrize("offline", [True, False])  # a mirror that is set is used either way
@pytest.mark.parametrize(
    "root", ["http://mirror.example:8080/kiln", "http://mirror.example:8080/kiln/"]
)
def test_with_a_mirror_url_the_filter_fetches_from_the_mirror(root, offline):
    assert mirrored_filter(NCCL_TESTS, {"url": root, "offline": offline}) == (
        "http://mirror.example:8080/kiln/github.com/NVIDIA/nccl-tests/archive/v2.13.6.tar.gz"
    )


def _with(mirror: dict | None) -> dict:
    return {} if mirror is None else {"kiln_mirror": mirror}


def _expect(upstream: str, mirror: dict | None) -> str:
    return upstream if mirror is None else mirrored_filter(upstream, mirror)


@pytest.mark.parametrize("mirror", [None, MIRROR])
def test_nccl_tests_comes_from_the_mirror_when_one_is_set(mirror):
    keys = ("nccl_tests_version", "nccl_tests_url")
    rendered = render_role_defaults("nccl", _with(mirror), keys)
    assert rendered["nccl_tests_url"] == _expect(NCCL_TESTS, mirror)


@pytest.mark.parametrize("mirror", [None, MIRROR])
@pytest.mark.parametrize(
    ("os_id", "arch"), [(o, a) for o, p in load_platforms().platforms.items() for a in p.arches]
)
def test_nvidias_repository_and_key_come_from_the_mirror_when_one_is_set(os_id, arch, mirror):
    table = load_platforms()
    platform = table.get(os_id)
    upstream = platform.repository_url(arch)
    entry = {"repository_url": upstream, "key_url": upstream + table.keys[platform.key].file}
    values = {"__nvidia_repo_platform": entry, **_with(mirror)}
    rendered = render_role_defaults(
        "nvidia_repo", values, ("nvidia_repo_url", "nvidia_repo_key_url")
    )
    assert rendered["nvidia_repo_url"] == _expect(upstream, mirror)
    assert rendered["nvidia_repo_key_url"] == _expect(entry["key_url"], mirror)


@pytest.mark.parametrize("mirror", [None, MIRROR])
@pytest.mark.parametrize("model", sorted(load_profiles()))
def test_burnins_wheel_index_comes_from_the_mirror_when_one_is_set(model, mirror):
    values = {"kiln_gpu_model": model, **_with(mirror)}
    rendered = render_role_defaults(
        "burnin", values, ("burnin_gpu_runtime", "burnin_pip_index_url")
    )
    upstream = rendered["burnin_gpu_runtime"]["index_url"]
    assert upstream in {r.index_url for r in load_compat().burnin_runtimes.values()}
    assert rendered["burnin_pip_index_url"] == _expect(upstream, mirror)
    if mirror is not None:
        assert in_mirror(rendered["burnin_pip_index_url"], mirror["url"])


def test_every_source_a_role_takes_is_named_url():
    """validate's offline rule (kiln.inventory.rules.mirror) checks the *_url variables an
    inventory writes: every role default that is or makes a download URL must be one of them."""
    misnamed = []
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            text = str(value)
            makes_url = "://" in text or "kiln_mirrored" in text or re.search(r"\w_url\b", text)
            if makes_url and not key.endswith("_url"):
                misnamed.append(f"{path.parent.parent.name}: {key}")
    assert misnamed == []
