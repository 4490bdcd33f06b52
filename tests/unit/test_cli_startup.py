"""Start fast, read well: `kiln --help` and `kiln validate` load no SSH, burn-in or Ansible code,
and every command's help is plain text with classic metavars and whole-sentence summaries."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kiln.app import COMMANDS, cli, load, main
from kiln.examples import write_example

HEAVY = ("paramiko", "fabric", "invoke", "ansible", "ansible_runner", "torch", "asyncio")
HEAVY_KILN = ("kiln.fleet", "kiln.burnin", "kiln.runner", "kiln.judging", "kiln.state")

# Runs kiln's main() like the `kiln` script, then lists the heavy modules it imported.
PROBE = """
import sys
from kiln.app import main
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
else:
    code = 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r} or m.startswith({kiln!r}))
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
print("COMMANDS=" + ",".join(sorted(m for m in sys.modules if m.startswith("kiln.commands."))),
      file=sys.stderr)
print("CODE=" + str(code), file=sys.stderr)
"""


def _imports(*argv: str) -> tuple[str, str]:
    """(stderr: the -X importtime table and the probe's lines, the heavy modules imported) of
    `kiln ARGV` in a fresh interpreter. (-X importtime does not list modules imported through
    importlib.import_module, the lazy group's way in; the probe reads sys.modules.)"""
    probe = PROBE.format(heavy=HEAVY, kiln=HEAVY_KILN)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe, *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "CODE=0" in proc.stderr, proc.stderr[-3000:]
    heavy = re.search(r"^HEAVY=(.*)$", proc.stderr, re.M)
    assert heavy is not None, proc.stderr[-3000:]
    return proc.stderr, heavy.group(1)


def test_help_imports_no_command():
    table, heavy = _imports("--help")
    assert heavy == ""
    assert "COMMANDS=\n" in table  # not even the cheap command modules


def test_validate_on_an_example_inventory_loads_no_ssh_burnin_or_ansible(tmp_path):
    write_example(tmp_path / "inv", 40)
    table, heavy = _imports("validate", str(tmp_path / "inv"))
    assert heavy == ""
    assert "COMMANDS=kiln.commands._vault,kiln.commands.validate\n" in table


def test_python_m_kiln_help_is_the_same_cli():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kiln", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0
    assert "Commands:" in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


def test_the_table_names_every_command_and_each_loads_under_its_name():
    for name in COMMANDS:
        assert load(name).name == name


def _every_command_path() -> list[list[str]]:
    paths = []

    def walk(command, path):
        paths.append(path)
        for name in getattr(command, "commands", {}):
            walk(command.commands[name], [*path, name])

    root = cli()
    for name in COMMANDS:
        walk(root.get_command(None, name), [name])
    return [[]] + paths


def test_help_is_plain_with_classic_metavars(capsys):
    for path in _every_command_path():
        with pytest.raises(SystemExit) as exited:
            main([*path, "--help"])
        assert exited.value.code == 0, path
        out = capsys.readouterr().out
        assert out.startswith(f"Usage: kiln {' '.join(path)}".rstrip() + " "), out
        assert not re.search(r"<[a-z][a-z \[\]|]*>", out), out  # no <bool>, <path>, <int range>
        assert not re.search(r"\{[a-z_]+\}", out), out  # no {inventory} in the usage line
        assert "╭" not in out, out  # no rich boxes: the same text in a pipe and on a terminal


def test_root_summaries_are_one_line_sentences(capsys):
    for name, (_, _, summary) in COMMANDS.items():
        assert summary.endswith(".") and "\n" not in summary, name
        assert len(f"  {name:<10} {summary}") <= 80, name
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == list(COMMANDS)  # one line each


def test_example_blocks_are_kept_verbatim(capsys):
    import typer

    from kiln.app import plain

    demo = typer.Typer(add_completion=False)

    @demo.command()
    def go() -> None:
        """Do the thing across the fleet, a sentence long enough that click would re-wrap it.

        Example:

            kiln exec inventory -n 'gpu[001-040]' -- nvidia-smi -L   # every GPU, listed

        The end.
        """

    command = plain(typer.main.get_command(demo))
    with pytest.raises(SystemExit):
        command(["--help"], prog_name="kiln go")
    out = capsys.readouterr().out
    assert (
        "      kiln exec inventory -n 'gpu[001-040]' -- nvidia-smi -L   # every GPU, listed\n"
        in out
    )


@pytest.mark.parametrize("path", [[], ["slurm"]], ids=["kiln", "kiln slurm"])
def test_a_group_alone_prints_its_help_and_exits_2(path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(path)
    captured = capsys.readouterr()
    assert exited.value.code == 2
    assert captured.out.startswith(f"Usage: kiln {' '.join(path)}".rstrip() + " [OPTIONS] COMMAND")
    assert "Commands:" in captured.out and captured.err == ""
