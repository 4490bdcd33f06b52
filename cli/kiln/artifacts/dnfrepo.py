"""dnf repositories for a bundle: each one's repomd.xml (its signature checked where the
repository signs it), every index file it lists for dnf, and the plan's rpms resolved there
with their requirements (kiln.artifacts.rpm); each package's own signature is checked with the
key its role fetches, as dnf does on the node (gpgcheck=1).

    index = read_dnf_repository(bundle, url, [Path(".../D42D0685.pub")])
    downloads = dnf_packages(bundle, plan["artifacts"], "rhel-9/x86_64", rpms, failed)

What no repository of the plan offers (a RHEL node's BaseOS and AppStream packages, and their
requirements) is left to the node's own repositories and recorded as such in bundle.json.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from kiln.artifacts.bundle import Bundle, Download, FetchError, NotPublished, index_bytes
from kiln.artifacts.rpm import RpmIndex, RpmIndexError, read_repomd, resolve
from kiln.artifacts.signatures import role_keys, verify_rpm, verify_signature
from kiln.mirror.layout import MirrorError

# Copies dnf on RHEL 9 does not read: yum's sqlite databases and the zchunk variants.
_SKIPPED_SUFFIXES = ("_db", "_zck")


def read_dnf_repository(bundle: Bundle, url: str, keys: list[Path]) -> RpmIndex:
    """A repository's repomd.xml and the index files it lists into the bundle, checked, and
    its primary index read."""
    base = url.rstrip("/")
    repomd_url = f"{base}/repodata/repomd.xml"
    bundle.get(Download(repomd_url, "", what=f"index of {url}"))
    repomd = bundle.path_of(repomd_url)
    try:  # repo_gpgcheck: verified where the repository signs its index
        bundle.get(Download(f"{repomd_url}.asc", "", what=f"signature of {url}'s index"))
        verify_signature(repomd, keys, signature=bundle.path_of(f"{repomd_url}.asc"))
    except NotPublished:
        pass  # unsigned index: every package's signature is checked instead (verify_rpm)
    try:
        listed = read_repomd(repomd.read_text(encoding="utf-8", errors="replace"))
    except RpmIndexError as exc:
        raise FetchError(f"{url}: {exc}") from None
    index = RpmIndex()
    for entry in listed:
        if entry.kind.endswith(_SKIPPED_SUFFIXES):
            continue
        item = Download(f"{base}/{entry.href}", entry.sha256, entry.size,
                        f"index {entry.kind} of {url}")  # fmt: skip
        bundle.get(item)
        if entry.kind == "primary":
            try:
                index.add(index_bytes(bundle.path_of(item.url)), base)
            except RpmIndexError as exc:
                raise FetchError(f"{url}: {exc}") from None
    if not any(entry.kind == "primary" for entry in listed):
        raise FetchError(f"{url}: its repomd.xml lists no primary index")
    return index


def dnf_packages(
    bundle: Bundle, artifacts: list[dict], platform: str, rpms: list[dict], failed: list[str]
) -> list[Download]:
    """The platform's dnf repositories read and its rpms resolved there: the packages to fetch,
    each to be checked with its repository's key."""
    arch = platform.split("/", 1)[1]
    keys_of = role_keys(artifacts, platform)
    index = RpmIndex()
    repo_keys: list[tuple[str, list[Path]]] = []  # repository URL -> the keys it is checked with
    for repo in (a for a in artifacts if a["platform"] == platform and a["kind"] == "repository"):
        try:
            keys = keys_of.get(repo.get("role", ""), [])
            for key in keys:
                bundle.get(key)
            paths = [bundle.path_of(k.url) for k in keys]
            part = read_dnf_repository(bundle, repo["source"], paths)
        except (FetchError, MirrorError) as exc:
            failed.append(f"repository {repo['source']} ({platform}): {exc}")
            continue
        repo_keys.append((repo["source"].rstrip("/") + "/", paths))
        index.merge(part)
    found = resolve(index, [(a["name"], a.get("version", "")) for a in rpms], arch)
    bundle.packages[platform] = {p.name: p.version for p in found.packages}
    bundle.elsewhere[platform] = found.elsewhere
    failed += [f"{why} ({platform})" for why in found.missing]

    def keys_for(url: str) -> list[Path]:
        return next((paths for prefix, paths in repo_keys if url.startswith(prefix)), [])

    return [
        Download(p.url, p.sha256, p.size, f"rpm {p.name} {p.version}",
                 check=partial(verify_rpm, keys=keys_for(p.url)))
        for p in found.packages
    ]  # fmt: skip
