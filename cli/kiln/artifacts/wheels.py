"""Python wheels for a bundle: pip resolves a plan's requirements for the Python and C library
of each OS release, and the bundle gets the simple index (PEP 503) a node's pip reads.

    wheels = resolve(["torch==2.5.1"], "https://download.pytorch.org/whl/cu124",
                     python="3.11", glibc="2.36", arch="x86_64")
    pages = index_pages("https://download.pytorch.org/whl/cu124", wheels)  # path -> HTML

Resolution is pip's own (`pip install --dry-run --report`, the resolver the node's pip runs),
aimed at the node's interpreter (cpXY) and manylinux level instead of this machine's, with
binary wheels only: a node never builds a source distribution. pip runs isolated from this
machine's configuration, so an extra index configured here cannot resolve what the node's index
lacks. Each wheel comes with the sha256 its index publishes, which the download is checked
against.

The pages sit where the node's pip asks for them, `<index>/<project>/`, under the index's path
in the bundle (kiln.mirror.layout), and link each wheel by its path relative to the page with
its sha256, so pip on the node checks every wheel again.
"""

from __future__ import annotations

import html
import json
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from kiln.mirror.layout import mirror_path
from kiln.profiles.platforms import load_platforms

TIMEOUT = 600.0  # a dry run reads metadata only, but torch's closure is a dozen indexes


class WheelError(Exception):
    """Requirements pip could not resolve for a release; the text says why, in pip's words."""


@dataclass(frozen=True, order=True)
class Wheel:
    project: str  # normalized (PEP 503): the name of its page
    version: str
    url: str
    sha256: str  # "" when the index publishes none


def normalized(name: str) -> str:
    """A project's name as an index spells its page (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# The manylinux tags older than PEP 600's spelling, by the glibc minor they stand for.
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(glibc: str, arch: str) -> list[str]:
    """The platform tags pip on such a node accepts, most specific first: every manylinux
    level its glibc meets (pip given --platform takes that exact tag only), then linux_<arch>
    (which PyTorch's own index uses)."""
    major, minor = (int(part) for part in glibc.split(".")[:2])
    tags = []
    for level in range(minor, 4, -1):
        tags.append(f"manylinux_{major}_{level}_{arch}")
        if level in _LEGACY and (arch in ("x86_64", "i686") or level == 17):
            tags.append(f"{_LEGACY[level]}_{arch}")
    return [*tags, f"linux_{arch}"]


def pip_target(python: str, glibc: str, arch: str) -> list[str]:
    """pip's options for a node's interpreter and platform instead of this machine's."""
    platforms = [option for tag in platform_tags(glibc, arch) for option in ("--platform", tag)]
    return ["--python-version", python, "--implementation", "cp", *platforms,
            "--only-binary=:all:"]  # fmt: skip


def resolve(
    requirements: list[str], index_url: str, python: str, glibc: str, arch: str
) -> list[Wheel]:
    """Every wheel a node with this Python and glibc installs for `requirements` from
    `index_url` (the whole closure), by pip's resolver; WheelError when pip cannot."""
    argv = [
        sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
        "--quiet", "--disable-pip-version-check", "--report", "-", "--index-url", index_url,
        *pip_target(python, glibc, arch),
    ]  # fmt: skip
    if urlsplit(index_url).scheme == "http":  # pip ignores a plain-http index otherwise
        argv += ["--trusted-host", urlsplit(index_url).hostname or ""]
    try:
        done = subprocess.run([*argv, *requirements], capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelError(f"pip could not run: {exc}") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        raise WheelError(errors[-1] if errors else done.stderr.strip()[-400:])
    try:
        report = json.loads(done.stdout)
        return sorted(_wheel(item) for item in report["install"])
    except (ValueError, KeyError, TypeError) as exc:
        raise WheelError(f"pip's report could not be read: {exc}") from None


def _wheel(item: dict) -> Wheel:
    info = item["download_info"]
    hashes = info.get("archive_info", {}).get("hashes", {})
    metadata = item["metadata"]
    return Wheel(normalized(metadata["name"]), metadata["version"], info["url"],
                 hashes.get("sha256", ""))  # fmt: skip


def bundle_path(url: str) -> str:
    """Where a wheel lies in the bundle: its URL's path decoded (torch-2.5.1+cu124-...whl),
    the name a web server serving the bundle maps the URL's %2B back to."""
    return unquote(mirror_path(url))


def index_pages(index_url: str, wheels: list[Wheel]) -> dict[str, str]:
    """The simple index of `wheels` at `index_url`'s place in the bundle: bundle path of each
    project's page (<index>/<project>/index.html) -> its HTML."""
    root = mirror_path(index_url).rstrip("/")
    projects: dict[str, set[Wheel]] = {}
    for wheel in wheels:
        projects.setdefault(wheel.project, set()).add(wheel)
    pages = {}
    for project, found in sorted(projects.items()):
        page = f"{root}/{project}"
        links = []
        for wheel in sorted(found):
            target = bundle_path(wheel.url)
            href = quote(posixpath.relpath(target, page))
            if wheel.sha256:
                href += f"#sha256={wheel.sha256}"
            name = html.escape(posixpath.basename(target))
            links.append(f'    <a href="{html.escape(href)}">{name}</a><br>')
        title = html.escape(project)
        pages[f"{page}/index.html"] = (
            "<!DOCTYPE html>\n<html>\n  <head><title>Links for "
            f"{title}</title></head>\n  <body>\n    <h1>Links for {title}</h1>\n"
            + "\n".join(links)
            + "\n  </body>\n</html>\n"
        )
    return pages


def requirements(artifacts: list[dict]) -> dict[tuple[str, str], list[str]]:
    """The plan's wheel lines as pip requirements, by (platform, index): what one resolution
    covers (a node installs them together, from that index)."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for a in artifacts:
        if a["kind"] == "wheel" and not a.get("unresolved"):
            pin = f"=={a['version']}" if a.get("version") else ""
            wanted.setdefault((a["platform"], a["source"]), []).append(f"{a['name']}{pin}")
    return wanted


def resolve_for(platform: str, index_url: str, wanted: list[str]) -> list[Wheel]:
    """`wanted` resolved for the interpreter and C library of `platform` (kiln_os/kiln_arch,
    from kiln's platforms.yml)."""
    kiln_os, _, arch = platform.partition("/")
    release = load_platforms().get(kiln_os)
    if release is None:
        raise WheelError(f"kiln_os {kiln_os!r} is not in kiln's platforms.yml")
    return resolve(wanted, index_url, release.python, release.glibc, arch)
