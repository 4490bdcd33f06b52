"""`kiln mirror`: what an air-gapped site must bring in before a provision and a burn-in."""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn

from kiln.artifacts.fetch import fetch_bundle
from kiln.artifacts.plan import mirror_plan
from kiln.artifacts.serve import BundleError, mirror_server
from kiln.commands._output import output_dir
from kiln.commands._vault import VaultIds, VaultPasswordFile, use_vault
from kiln.console import err, print_json, safe
from kiln.errors import EnvironmentProblem, InvalidInputError
from kiln.inventory import require_valid
from kiln.mirror.layout import MANIFEST

app = typer.Typer(no_args_is_help=True, help="What an air-gapped site must mirror.")


@app.command("plan")
def plan(
    inventory: Annotated[Path, typer.Argument(help="The inventory directory.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    vault_id: VaultIds = None,
    vault_password_file: VaultPasswordFile = None,
) -> int:
    """Every artifact a provision and a burn-in of INVENTORY fetch: one line per artifact, its
    kind (deb, rpm, wheel, image, file, repository, key), name, exact version where a role pins one
    ("-": the repository's current one), OS release and architecture, source, checksum, and
    the task that fetches it. Derived from the roles themselves, walked with each kind of
    node's variables: a new package in a role is a new line here. An artifact whose name or
    version only the node can say (its kernel, what it has installed) says so ("unresolved");
    one fetched only under a condition the node decides says which ("when").

    Exit 0 with the plan printed; 2 on an invalid inventory.

    Example:

        kiln mirror plan inventories/example-h100 --json > mirror-plan.json
    """
    cluster = require_valid(inventory, use_vault(vault_id, vault_password_file))
    result = mirror_plan(cluster)
    if json_:
        print_json("mirror-plan", result.to_dict())
    else:
        for line in result.lines():
            typer.echo(line)
    unresolved = result.unresolved
    err.print(
        f"{len(result.artifacts)} artifacts for {safe(', '.join(result.platforms))}"
        + (f"; {len(unresolved)} need the node to resolve them" if unresolved else "")
    )
    return 0


PLAN_HINT = "write one with `kiln mirror plan INVENTORY --json > PLAN`"


def _read_plan(path: Path) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(
            f"{path} is not a readable mirror plan ({exc})", hint=PLAN_HINT
        ) from None
    if not isinstance(document, dict) or document.get("kiln") != "mirror-plan":
        raise InvalidInputError(
            f'{path} is not a mirror plan (no "kiln": "mirror-plan")', hint=PLAN_HINT
        )
    return document


def _installed(values: list[str], plan: dict) -> dict[str, str]:
    """--installed PLATFORM=FILE values read: platform -> the dpkg status text."""
    debs = {a["platform"] for a in plan.get("artifacts", []) if a.get("kind") == "deb"}
    baseline = {}
    for value in values:
        platform, _, name = value.partition("=")
        if not name or platform not in debs:
            raise InvalidInputError(
                f"--installed {value!r}: not PLATFORM=FILE for a platform whose debs the plan "
                f"names ({', '.join(sorted(debs)) or 'none'})",
                hint="copy /var/lib/dpkg/status from a freshly installed node of that platform",
            )
        try:
            baseline[platform] = Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InvalidInputError(f"--installed {value!r}: {exc.strerror}") from None
    return baseline


class _Bar:
    """Counts and bytes on a terminal; a line every 10 s (and at the end) off one."""

    def __init__(self) -> None:
        self.rich = err.is_terminal
        self.last = 0.0
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            DownloadColumn(), console=err, transient=True,
        )  # fmt: skip
        self.files = self.progress.add_task("files", total=None)
        self.current = self.progress.add_task("", total=None)

    def __call__(self, done: int, total: int, got: int, size: int, what: str) -> None:
        if self.rich:
            self.progress.update(self.files, completed=done, total=total)
            self.progress.update(self.current, completed=got, total=size or None,
                                 description=safe(what)[:60])  # fmt: skip
        elif time.monotonic() - self.last > 10 or done == total:
            self.last = time.monotonic()
            err.print(f"{done}/{total} files; {safe(what)}")


@app.command("fetch")
def fetch(
    plan_file: Annotated[
        Path, typer.Argument(metavar="PLAN", help="A plan: `kiln mirror plan INVENTORY --json`.")
    ],
    to: Annotated[Path, typer.Option("--to", help="The bundle's folder (made if missing).")],
    installed: Annotated[
        list[str] | None,
        typer.Option(
            "--installed",
            metavar="PLATFORM=FILE",
            help="What the nodes of PLATFORM (debian-13/x86_64) have before a provision: a "
            "copy of one's /var/lib/dpkg/status. A package installed there at a version the "
            "plan accepts is not fetched, nor are its Recommends: the bundle is then what those "
            "nodes fetch. Repeat per platform; without it, the closure as on an empty system.",
        ),
    ] = None,
) -> int:
    """Download every artifact PLAN names into the bundle at --to, on a machine that can reach
    the sources. Each file lands at its source's host and path (what a mirror serving the
    folder as it is needs); apt repositories' signed indexes are checked with gpgv (the
    distribution's keyring, or the key the plan fetches for that role) and the plan's packages
    resolved there with their dependencies; Python wheels are resolved by pip for each OS
    release's interpreter, and the bundle gets their index pages; every file is checked against
    the sha256 its source publishes. Run again, it fetches only what is missing; a failed
    download names the artifact and its source, and the bundle keeps only whole, checked files
    (bundle.json lists them). PLAN is what `kiln mirror plan INVENTORY --json` prints.

    Exit 0 when everything was fetched; 1 when something could not be (each named, the rest
    fetched); 2 on a PLAN that is not a plan; 3 when --to cannot be written.

    Example:

        kiln mirror fetch plan.json --to /srv/kiln-bundle
    """
    plan_document = _read_plan(plan_file)
    baseline = _installed(installed or [], plan_document)
    root = output_dir(to)
    bar = _Bar()
    with bar.progress if bar.rich else nullcontext():  # a live bar on a terminal only
        outcome = fetch_bundle(plan_document, root, bar, installed=baseline)
    err.print(
        f"{len(outcome.fetched)} fetched ({outcome.bytes / 1e6:.1f} MB), {len(outcome.kept)} "
        f"already whole in {safe(str(root))}; {MANIFEST} lists them"
    )
    for platform, names in sorted(outcome.elsewhere.items()):
        err.print(
            f"{safe(platform)}: {len(names)} package(s) and requirement(s) no repository of "
            f"the plan offers, left to the nodes' own repositories: {safe(', '.join(names[:8]))}"
            + (" ..." if len(names) > 8 else "")
        )
    for failure in outcome.failed:
        err.print(f"[bold red]not fetched[/]: {safe(failure)}")
    return 1 if outcome.failed else 0


@app.command("serve")
def serve(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `kiln mirror fetch`.")],
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535)] = 8080,
    bind: Annotated[str, typer.Option("--bind", help="The address to listen on.")] = "0.0.0.0",  # noqa: S104
    log: Annotated[
        Path | None, typer.Option("--log", help="Append the access log here (default: stderr).")
    ] = None,
) -> int:
    """Serve BUNDLE over HTTP as it lies, until stopped: the files its bundle.json lists and
    nothing else, each request one access-log line (time, client, method, path,
    status). Nodes fetch each source from http://HOST:PORT/ followed by the source's host and
    path: set kiln_mirror.url to http://HOST:PORT in the inventory.

    Exit 2 when BUNDLE is not a bundle; 3 when the port cannot be bound.

    Example:

        kiln mirror serve /srv/kiln-bundle --port 8080 --log /var/log/kiln-mirror.log
    """
    stream = log.open("a", encoding="utf-8") if log else None
    try:
        server = mirror_server(bundle, bind, port, stream or sys.stderr)
    except BundleError as exc:
        raise InvalidInputError(str(exc)) from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from None
    err.print(f"serving {len(server.files)} files of {safe(str(bundle))} on http://{bind}:{port}/")
    try:
        server.serve_forever()
    finally:
        server.server_close()
        if stream:
            stream.close()
    return 0
