"""`kiln mirror fetch`: a plan's artifacts downloaded into a bundle a mirror serves as it is.

    outcome = fetch_bundle(plan_document, Path("bundle"), progress)
    outcome.fetched, outcome.kept, outcome.failed     # failed: "what (from where): why"

The bundle holds every file at its source's host and path (kiln.mirror.layout), the bytes the
source published, so a mirror serving the bundle's folder is the upstream layout under one
root, and the signed indexes are the publishers' own: nodes trust the mirror with the keys they
already trust. For each OS release in the plan, every apt repository (the distribution's
archive and the roles' repositories) is read: its InRelease checked with gpgv against its
keyring (the distribution's, or the key the plan fetches for that role), its Packages index
checked against the InRelease's SHA256; the plan's deb packages are resolved there with their
dependencies (kiln.artifacts.apt) and fetched with the index's sha256. Every dnf repository
is read the same way (kiln.artifacts.dnfrepo: repomd.xml, its signature where published, the
index files it lists), the plan's rpms resolved there with their requirements and each package's
signature checked with its role's key; what no repository of the plan offers is left to the
node's own repositories (bundle.json: from_node_repositories). Files are checked
against the plan's sha256 where it has one. Python wheels are resolved by pip for each
release's interpreter and fetched with their index's sha256, and the bundle gets the simple
index pages the nodes' pip reads (kiln.artifacts.wheels).

Every download goes to a `.part` file and is renamed into place only once its checksum held,
so the bundle holds only whole, checked files whatever stops the run; `bundle.json` lists
them, and the exact version each platform's packages resolved to (the plan's unpinned lines
made exact: what the nodes will install). Run again, it fetches only what is missing. What
cannot be fetched (an unreachable source, a checksum that does not hold, a package no
repository offers, a kind kiln does not fetch) is named with its source, and the rest is
still fetched.
"""

from __future__ import annotations

from pathlib import Path

from kiln.artifacts import wheels
from kiln.artifacts.aptrepo import apt_packages
from kiln.artifacts.bundle import (
    Bundle,
    Download,
    FetchError,
    FetchOutcome,
    Opener,
    Progress,
    open_url,
)
from kiln.artifacts.dnfrepo import dnf_packages
from kiln.artifacts.oci import image_downloads
from kiln.mirror.layout import MirrorError

# The kinds whose lines are resolved together per platform (repositories read, then closure).
PACKAGES = {"deb": apt_packages, "rpm": dnf_packages}
KNOWN = {"file", "key", "repository", "wheel", "image", *PACKAGES}


def plan_downloads(bundle: Bundle, plan: dict, failed: list[str]) -> list[Download]:
    """Every file the plan names, its repositories read and its packages resolved: the list to
    download (what cannot be resolved goes to `failed`, named)."""
    artifacts = plan.get("artifacts", [])
    downloads: list[Download] = []
    for a in artifacts:
        if a.get("unresolved"):
            failed.append(f"{a['kind']} {a['name']} ({a['platform']}, {a['where']}): "
                          f"unresolved: {a['unresolved']}")  # fmt: skip
        elif a["kind"] in ("file", "key"):
            checksum = a.get("checksum", "")
            sha = checksum.split(":", 1)[1] if checksum.startswith("sha256:") else ""
            downloads.append(Download(a["source"], sha, what=f"{a['kind']} {a['name']}"))
        elif a["kind"] == "image":
            try:
                downloads += image_downloads(bundle, a)
            except FetchError as exc:
                failed.append(str(exc))
        elif a["kind"] not in KNOWN:
            failed.append(f"{a['kind']} {a['name']} ({a['platform']}): kiln mirror fetch does "
                          f"not fetch a {a['kind']}")  # fmt: skip
    for platform in sorted({a["platform"] for a in artifacts}):
        for kind, resolve_packages in PACKAGES.items():
            wanted = [a for a in artifacts if a["platform"] == platform and a["kind"] == kind
                      and not a.get("unresolved")]  # fmt: skip
            if wanted:
                downloads += resolve_packages(bundle, artifacts, platform, wanted, failed)
    for (platform, index), wanted in wheels.requirements(artifacts).items():
        try:
            found = wheels.resolve_for(platform, index, wanted)
        except wheels.WheelError as exc:
            failed.append(f"wheel {' '.join(wanted)} ({platform}, {index}): {exc}")
            continue
        bundle.wheel_versions.setdefault(platform, {}).update({w.project: w.version for w in found})
        bundle.indexes.setdefault(index, set()).update(found)
        downloads += [Download(w.url, w.sha256, what=f"wheel {w.project} {w.version}",
                               path=wheels.bundle_path(w.url)) for w in found]  # fmt: skip
    return downloads


def write_index_pages(bundle: Bundle) -> None:
    """Each pip index's pages, listing the wheels the bundle holds whole (a page is rewritten
    on every run: it lists what this run left in place)."""
    for index, found in sorted(bundle.indexes.items()):
        whole = [w for w in found if wheels.bundle_path(w.url) in bundle.files]
        for path, page in wheels.index_pages(index, whole).items():
            url = f"{index.rstrip('/')}/{Path(path).parent.name}/"
            bundle.put(path, url, page.encode("utf-8"))


def fetch_bundle(plan: dict, root: Path, progress: Progress | None = None,
                 opener: Opener = open_url,
                 installed: dict[str, str] | None = None) -> FetchOutcome:  # fmt: skip
    """Everything the plan names into the bundle at `root` (made if missing); see the module.
    `installed`: platform -> a node's dpkg status file (what its nodes have before a
    provision, which apt does not fetch again; kiln.artifacts.apt.resolve)."""
    root.mkdir(parents=True, exist_ok=True)
    bundle = Bundle(root, opener, installed=dict(installed or {}))
    outcome = FetchOutcome()
    finished = False
    try:
        downloads = plan_downloads(bundle, plan, outcome.failed)
        unique = list({d.url: d for d in downloads}.values())
        for number, item in enumerate(unique, 1):

            def on_bytes(done: int, size: int, item: Download = item, number: int = number):
                if progress:
                    progress(number - 1, len(unique), done, size, item.what)

            try:
                now = bundle.get(item, on_bytes)
            except (FetchError, MirrorError) as exc:
                outcome.failed.append(str(exc))
                continue
            relative = bundle.place(item)
            (outcome.fetched if now else outcome.kept).append(relative)
            outcome.bytes += bundle.files[relative]["size"] if now else 0
            if progress:
                progress(number, len(unique), item.size, item.size, item.what)
        write_index_pages(bundle)
        finished = True
    finally:  # whatever stopped it, the manifest lists exactly the whole files
        bundle.write_manifest(plan, outcome.failed, complete=finished and not outcome.failed)
        outcome.elsewhere = {k: v for k, v in bundle.elsewhere.items() if v}
    return outcome
