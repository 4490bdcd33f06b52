"""What a stage manages on a host, gathered from the task results the run already sees.

copy and template name the file they wrote (`dest`), lineinfile, blockinfile and ini_file the file
they edited (`path`); apt, package and dpkg_selections name packages; systemd, systemd_service and
service name a unit. A loop's result carries one result per item. A `no_log` task's result is
censored and names nothing: what it manages is covered by the fingerprint only.

kiln's callback (runner/callback) keeps of each ok result only what `slim` keeps, so this reads
the same fields from its events and from a worker controller's full ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FILE_ACTIONS = {"copy": "dest", "template": "dest"}
EDIT_ACTIONS = {"lineinfile", "blockinfile", "ini_file", "replace"}
PACKAGE_ACTIONS = {"apt", "package", "dpkg_selections", "dnf", "yum"}
SERVICE_ACTIONS = {"systemd", "systemd_service", "service"}
KEPT = ("dest", "path", "name", "state", "enabled", "failed", "skipped")


def short(action: str | None) -> str:
    """`ansible.builtin.copy` -> `copy`."""
    return (action or "").rsplit(".", 1)[-1]


def managed_action(action: str | None) -> bool:
    name = short(action)
    return (
        name in FILE_ACTIONS
        or name in EDIT_ACTIONS
        or name in PACKAGE_ACTIONS
        or (name in SERVICE_ACTIONS)
    )


def slim(result: dict[str, Any]) -> dict[str, Any]:
    """The fields `gather` reads, for the callback's compact ok event (one level of loop)."""
    kept: dict[str, Any] = {key: result[key] for key in KEPT if key in result}
    args = (result.get("invocation") or {}).get("module_args") or {}
    picked = {k: args[k] for k in ("name", "pkg", "path", "dest", "state") if k in args}
    if picked:
        kept["invocation"] = {"module_args": picked}
    items = result.get("results")
    if isinstance(items, list):
        kept["results"] = [slim(item) for item in items if isinstance(item, dict)]
    return kept


def _package_names(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value] if value else []
    names = []
    for item in values:
        text = str(item).strip()
        if not text or "/" in text or text.endswith(".deb"):
            continue  # a file or URL to install, not a package name
        name = text.split("=", 1)[0].split(">", 1)[0].split("<", 1)[0].strip()
        if name and "*" not in name and not name.startswith("-"):
            names.append(name)
    return names


@dataclass(slots=True)
class Managed:
    """One host's managed files, packages and services in one stage (sorted, no duplicates)."""

    files: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    services: set[str] = field(default_factory=set)

    def add(self, action: str | None, result: dict[str, Any]) -> None:
        """Note what one ok task result (or each item of a loop's) manages."""
        if not isinstance(result, dict) or not managed_action(action):
            return
        items = result.get("results")
        if isinstance(items, list):
            for item in items:
                self.add(action, item)
            return
        if result.get("failed") or result.get("skipped"):
            return
        name = short(action)
        args = (result.get("invocation") or {}).get("module_args") or {}
        if name in FILE_ACTIONS:
            path = result.get("dest") or args.get("dest")
            if isinstance(path, str) and path.startswith("/") and not path.endswith("/"):
                self.files.add(path)
        elif name in EDIT_ACTIONS:
            path = args.get("path") or args.get("dest") or result.get("path")
            if isinstance(path, str) and path.startswith("/"):
                self.files.add(path)
        elif name in PACKAGE_ACTIONS:
            if str(args.get("state") or "present") in ("absent", "purge"):
                return
            self.packages.update(_package_names(args.get("name") or args.get("pkg")))
            if name == "dpkg_selections":
                self.packages.update(_package_names(result.get("name")))
        elif name in SERVICE_ACTIONS:
            unit = result.get("name") or args.get("name")
            if isinstance(unit, str) and unit and "*" not in unit:
                self.services.add(unit)

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "files": sorted(self.files),
            "packages": sorted(self.packages),
            "services": sorted(self.services),
        }
