"""`kiln mirror serve`: a bundle served over HTTP as it lies, with an access log.

    server = mirror_server(Path("bundle"), "0.0.0.0", 8080, log=sys.stderr)
    server.serve_forever()

The bundle's folder is already the upstream layout under one root (kiln.artifacts.fetch), so
serving is static: GET and HEAD of the files bundle.json lists (a folder's index.html for the
folder: a pip index's project page; under /v2/ an image's manifests and blobs with the
registry API's headers, so Docker, containerd and enroot pull from it), and nothing else (a `.part`
left by an interrupted fetch, a file copied in by hand, a path outside the folder: 404). Each
request is one access-log line, `time client method path status`: what the nodes asked
for, to hold against `kiln mirror plan`. A site with its own mirror (an apt mirror, Nexus,
Pulp) serves the same folder instead.

It needs the standard library only, so a mirror host without kiln's dependencies runs it from
a copy of kiln's source: `PYTHONPATH=cli python3 -m kiln.artifacts.serve BUNDLE --port 8080`.
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import os
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import TextIO
from urllib.parse import unquote, urlsplit

from kiln.mirror.layout import MANIFEST


class BundleError(ValueError):
    """A folder that is not a bundle (no readable bundle.json)."""


def bundle_files(root: Path) -> dict[str, dict]:
    """The paths a bundle holds whole, each with its entry (its bundle.json)."""
    try:
        document = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        return dict(document["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleError(
            f"{root} is not a kiln bundle ({MANIFEST}: {exc}); make one with `kiln mirror fetch`"
        ) from None


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _MirrorServer

    def send_head(self):  # the one place GET and HEAD decide what to send
        path = unquote(urlsplit(self.path).path).lstrip("/")
        if path.rstrip("/") == "v2":  # a registry client's first question: the API is here
            return self._send(b"{}", "application/json")
        if path.endswith("/") or not path:  # a pip index's project page: its index.html
            path += "index.html"
        entry = self.server.files.get(path)
        if entry is None:
            self.send_error(404, "not in this bundle")
            return None
        if path.startswith("v2/"):  # an image's manifest or blob: the registry API's headers
            media_type = entry.get("media_type") or "application/octet-stream"
            return self._send(self.translate_path(self.path), media_type,
                              digest="sha256:" + entry["sha256"])  # fmt: skip
        return super().send_head()

    def _send(self, body: bytes | str, media_type: str, digest: str = ""):
        """A 200 with the registry API's headers; the file (or bytes) for GET to copy."""
        source = open(body, "rb") if isinstance(body, str) else io.BytesIO(body)  # noqa: SIM115
        size = os.fstat(source.fileno()).st_size if isinstance(body, str) else len(body)
        self.send_response(200)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(size))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        return source

    def list_directory(self, path):  # never: a bundle is served file by file
        self.send_error(404, "not in this bundle")

    def log_request(self, code="-", size="-"):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        status = getattr(code, "value", code)
        line = f"{stamp} {self.client_address[0]} {self.command} {self.path} {status}\n"
        with self.server.lock:
            self.server.log.write(line)
            self.server.log.flush()

    def log_message(self, format, *args):  # noqa: A002 - errors go through log_request
        return


class _MirrorServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    files: dict[str, dict]
    log: TextIO
    lock: threading.Lock


def mirror_server(root: Path, host: str, port: int, log: TextIO) -> _MirrorServer:
    """An HTTP server of the bundle at `root` (not yet serving: call serve_forever)."""
    files = bundle_files(root)
    server = _MirrorServer((host, port), partial(_Handler, directory=str(root)))
    server.files, server.log, server.lock = files, log, threading.Lock()
    return server


def main(argv: list[str] | None = None) -> int:
    """`python3 -m kiln.artifacts.serve BUNDLE [--port N] [--bind ADDR]`: the log on stdout."""
    parser = argparse.ArgumentParser(prog="kiln.artifacts.serve", description=__doc__)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - a mirror serves a network
    args = parser.parse_args(argv)
    try:
        server = mirror_server(args.bundle, args.bind, args.port, sys.stdout)
    except BundleError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"serving {len(server.files)} files on {args.bind}:{args.port}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
