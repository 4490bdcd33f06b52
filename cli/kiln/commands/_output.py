"""`-o/--output` paths: checked before any work starts, written without a traceback.

    folder = output_dir(output)      # burn-in: made and write-tested now, exit 3 naming it
    target = output_file(output)     # fabric topology: its folder made and writable, now
    with writing(path): ...          # an OSError while writing: exit 3 naming the path

Every failure is an EnvironmentProblem (exit 3) of one line: "cannot write PATH: why".
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from kiln.errors import EnvironmentProblem

HINT = "give --output a path you can write (a folder for burnin and plan, a file for fabric)"


def _problem(path: Path | str, error: OSError | str) -> EnvironmentProblem:
    why = error if isinstance(error, str) else (error.strerror or str(error))
    return EnvironmentProblem(f"cannot write {path}: {why}", hint=HINT)


def _probe(folder: Path) -> None:
    probe = folder / f".kiln-write-test-{os.getpid()}"
    try:
        probe.write_text("ok\n")
        probe.unlink()
    except OSError as error:
        raise _problem(folder, error) from None


def output_dir(path: Path, *, probe: bool = True) -> Path:
    """`path` as a folder kiln can write into (made when missing). probe=False skips the
    write test (`kiln plan` leaves unchanged files alone, so a read-only folder of files
    already up to date is fine; a write that fails is caught by `writing`)."""
    if path.exists() and not path.is_dir():
        raise _problem(path, "it is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _problem(error.filename or path, error) from None
    if probe:
        _probe(path)
    return path


def output_file(path: Path) -> Path:
    """`path` as a file kiln can write (its folder made when missing; the file not touched)."""
    if path.is_dir():
        raise _problem(path, "it is a folder; give a file name")
    output_dir(path.parent if str(path.parent) else Path("."))
    if path.exists() and not os.access(path, os.W_OK):
        raise _problem(path, "permission denied")
    return path


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an OSError while writing `path` into exit 3 naming it (a disk that filled up)."""
    try:
        yield
    except OSError as error:
        raise _problem(error.filename or path, error) from None
