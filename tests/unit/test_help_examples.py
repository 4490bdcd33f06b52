"""Every command's --help shows one example, unwrapped, that starts with `kiln` (issue 20)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kiln.app import COMMANDS, load


def _leaves() -> list[tuple[str, ...]]:
    paths = []
    for name in COMMANDS:
        command = load(name)
        if getattr(command, "commands", None):  # a group: its subcommands
            paths += [(name, sub) for sub in command.commands]
        else:
            paths.append((name,))
    return paths


@pytest.mark.parametrize("path", _leaves(), ids=" ".join)
def test_each_command_help_shows_one_example(path):
    command = load(path[0])
    result = CliRunner().invoke(command, [*path[1:], "--help"], prog_name=f"kiln {path[0]}")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert sum(line.strip() == "Example:" for line in lines) == 1, result.output
    example = lines[lines.index("  Example:") + 2].strip()
    assert example.startswith("kiln " + " ".join(path).replace("_", "-")), example
