"""`kiln mirror serve` of a bundle on a free local port, for the length of a `with` block.

with serving(bundle) as (url, log):   # log: the access log, one line per request
    ...
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kiln.artifacts.serve import mirror_server


@contextmanager
def serving(root: Path) -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    server = mirror_server(root, "127.0.0.1", 0, log)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
