"""`kiln mirror serve`: a bundle served over HTTP as it lies, with an access log.

    server = mirror_server(Path("bundle"), "0.0.0.0", 8080, log=sys.stderr)
    server.serve_forever()

The bundle's folder is already the upstream layout under one root (kiln.artifacts.fetch), so
serving is static: GET and HEAD of the files bundle.json lists (a folder's index.html for the
folder: a pip index's project page), and nothing else (a `.part`
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
import json
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


def bundle_files(root: Path) -> frozenset[str]:
    """The paths a bundle holds whole (its bundle.json)."""
    try:
        document = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        return frozenset(document["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleError(
            f"{root} is not a kiln bundle ({MANIFEST}: {exc}); make one with `kiln mirror fetch`"
        ) from None


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _MirrorServer

    def send_head(self):  # the one place GET and HEAD decide what to send
        path = unquote(urlsplit(self.path).path).lstrip("/")
        if path.endswith("/") or not path:  # a pip index's project page: its index.html
            path += "index.html"
        if path not in self.server.files:
            self.send_error(404, "not in this bundle")
            return None
        return super().send_head()

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
    files: frozenset[str]
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
