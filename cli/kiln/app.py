"""The root Typer app: a table of commands imported only when used, and one error handler.

`kiln --help` and `kiln validate` must not pay for SSH, burn-in or Ansible code, so the root is a
lazy group: it lists the commands from COMMANDS (name, module, one-line summary) and imports a
command's module only when that command runs or its own --help is asked. Help is click's plain
layout (it reads the same in a pipe as on a terminal) with classic metavars (INVENTORY, PATH,
INTEGER) and example blocks (indented lines, or lines starting `$ ` or `kiln `) kept verbatim.
"""

from __future__ import annotations

import importlib
import inspect
import re
import signal
import sys
import threading

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from kiln import __version__
from kiln.errors import ExitCode, KilnError, Terminated

# name: (module in kiln.commands, attribute: a command function or a typer.Typer, summary).
# The summary is what `kiln --help` lists: one full sentence, without importing the module.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": ("validate", "validate", "Check an inventory and report every problem at once."),
    "plan": ("plan", "plan", "Show what `kiln provision` would do, offline."),
    "init": ("init", "init", "Write a starting inventory to edit."),
    "provision": ("provision", "provision", "Provision the inventory's hosts, stage by stage."),
    "unlock": ("unlock", "unlock", "Show who holds the provision locks."),
    "facts": ("facts", "facts", "Print the facts saved by the last preflight run."),
    "report": ("report", "report", "Render a burn-in run as text, JUnit or HTML."),
    "burnin": ("burnin", "burnin", "Run burn-in through Slurm, judge it, drain what fails."),
    "exec": ("exec_", "exec_", "Run one command on many nodes over SSH."),
    "health": ("health", "health", "Run the node health check on the compute nodes."),
    "drain": ("drain", "drain", "Drain nodes in Slurm with an operator reason."),
    "resume": ("resume", "resume", "Resume nodes drained with `kiln drain`."),
    "inspect": ("inspect", "inspect", "Compare one node's hardware with its declaration."),
    "status": ("status", "status", "Show nodes by Slurm state, with drain reasons."),
    "funnel": ("funnel", "funnel", "Show where the bring-up stands, step by step."),
    "triage": ("triage", "triage", "Mark a failed node as under triage."),
    "rma": ("triage", "rma", "Mark a failed node as returned to its vendor."),
    "sandbox": ("sandbox", "app", "Run a local sandbox of containers that act as servers."),
    "slurm": ("slurm", "app", "Slurm maintenance on a provisioned cluster."),
    "fabric": ("fabric", "app", "Write topology.conf from what the InfiniBand fabric reports."),
    "power": ("power", "app", "Show and set GPU power and cooling policy."),
    "mirror": ("mirror", "app", "List what an air-gapped site must mirror before a provision."),
}

_EXAMPLE = re.compile(r"^(\s|\$ |kiln )")
_TYPES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN"}


class _Argument(TyperArgument):
    """INVENTORY in the usage line and the help, no type beside it."""

    def _rich_display_name(self) -> str:
        return (self.metavar or self.name.upper()) + ("..." if self.nargs != 1 else "")

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx) -> str | None:
        return None


class _Option(TyperOption):
    """`--fanout INTEGER`, `--output PATH`, `--format [text|json]`; a flag shows nothing."""

    def display_type_rich(self, ctx) -> str | None:
        if self.metavar is not None:
            return self.metavar
        label = self.display_type(ctx).strip("<>")
        label = re.sub(r"^list\[(.*)\]$", r"\1", label).removesuffix(" range")
        if "|" in label:
            return f"[{label}]"
        return _TYPES.get(label, label.upper())


def _format_help_text(command, ctx, formatter) -> None:
    """click's help text, with example paragraphs marked (\\b) so they are not re-wrapped."""
    text = (command.help or "").partition("\f")[0]
    paragraphs = [p for p in re.split(r"\n\s*\n", _dedent(text)) if p.strip()]
    marked = ["\b\n" + p if all(map(_EXAMPLE.match, p.splitlines())) else p for p in paragraphs]
    if marked:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("\n\n".join(marked))


def _dedent(text: str) -> str:
    return inspect.cleandoc(text)


def _summary(command) -> str:
    """A command's first sentence, whole (click would cut it at 45 characters)."""
    if command.short_help:
        return command.short_help
    first = " ".join(_dedent(command.help or "").partition("\n\n")[0].split())
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`])", first, maxsplit=1)[0]


class _Command(TyperCommand):
    def format_help_text(self, ctx, formatter) -> None:
        _format_help_text(self, ctx, formatter)


class _Group(TyperGroup):
    """A command group with plain help: examples kept, whole first sentences listed."""

    def format_help_text(self, ctx, formatter) -> None:
        _format_help_text(self, ctx, formatter)

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, self._row(ctx, name)) for name in self.list_commands(ctx)]
        rows = [(name, summary) for name, summary in rows if summary is not None]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def _row(self, ctx, name: str) -> str | None:
        command = self.get_command(ctx, name)
        return None if command is None or command.hidden else _summary(command)


class LazyGroup(_Group):
    """The root: commands listed from COMMANDS, each module imported on first use."""

    def list_commands(self, ctx) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        if name not in self.commands:
            self.commands[name] = load(name)
        return self.commands[name]

    def _row(self, ctx, name: str) -> str | None:
        return COMMANDS[name][2] if name in COMMANDS else super()._row(ctx, name)


def load(name: str):
    """The click command `kiln NAME`: its module imported, its help made plain."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(importlib.import_module(f"kiln.commands.{module}"), attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return plain(command)


def plain(command):
    """Give `command` and everything under it kiln's plain help classes (subclasses adding no
    state); a command with a class of its own keeps it."""
    command.rich_markup_mode = None
    if type(command) is TyperGroup:
        command.__class__ = _Group
    elif type(command) is TyperCommand:
        command.__class__ = _Command
    for sub in getattr(command, "commands", {}).values():
        plain(sub)
    for param in command.params:
        if type(param) is TyperArgument:
            param.__class__ = _Argument
        elif type(param) is TyperOption:
            param.__class__ = _Option
    return command


app = typer.Typer(
    name="kiln",
    cls=LazyGroup,
    help=(
        "Turn racks of bare-metal GPU servers into a validated Slurm GPU cluster.\n\n"
        "\b\nExit codes:\n"
        "  0    success\n"
        "  1    something failed\n"
        "  2    invalid input (nothing touched)\n"
        "  3    environment or precondition\n"
        "  4    changes pending (kiln plan --detailed-exitcode)\n"
        "  130  interrupted"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"kiln {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """kiln: inventory in, proven GPU cluster out."""


def cli() -> LazyGroup:
    """The root click group (built once per call; commands still load lazily)."""
    return plain(typer.main.get_command(app))


def is_click(error: BaseException, name: str) -> bool:
    """`error` is click's exception class `name` or a subclass, from click itself or from the
    copy that recent typer releases vendor as typer._click (and raise instead of click's own).
    Matched by name so that `kiln --help` need not import click as well as typer's copy."""
    return any(
        cls.__name__ == name and cls.__module__.startswith(("click.", "typer._click."))
        for cls in type(error).__mro__
    )


def _usage_line(error: BaseException) -> str:
    """One line: what was wrong and where to look, e.g. "No such command 'x'" + the help hint."""
    ctx = getattr(error, "ctx", None)
    where = ctx.command_path if ctx is not None else "kiln"
    return f"{error.format_message()} (see `{where} --help`)"  # type: ignore[attr-defined]


def _exit_code(error: BaseException) -> int:
    """The exit code for an error out of a command, after printing it; re-raises the unknown."""
    from kiln.console import err, safe  # rich: only when there is something to print

    if isinstance(error, KilnError):
        err.print(f"[bold red]error:[/] {safe(error.message)}")
        if error.hint:
            err.print(f"  hint: {safe(error.hint)}")
        return int(error.exit_code)
    if isinstance(error, Terminated):
        err.print("terminated (SIGTERM)")
        return int(ExitCode.TERMINATED)
    if isinstance(error, KeyboardInterrupt) or is_click(error, "Abort"):
        err.print("interrupted")
        return int(ExitCode.INTERRUPTED)
    if is_click(error, "NoArgsIsHelpError"):  # `kiln` or `kiln slurm` alone: the help, exit 2
        print(error.format_message())  # type: ignore[attr-defined]
        return int(ExitCode.INVALID_INPUT)
    if is_click(error, "UsageError"):
        err.print("[bold red]error:[/] ", end="")
        err.print(_usage_line(error), markup=False, highlight=False)
        return int(ExitCode.INVALID_INPUT)
    if is_click(error, "ClickException"):
        error.show()  # type: ignore[attr-defined]
        return error.exit_code  # type: ignore[attr-defined]
    if is_click(error, "Exit"):
        return error.exit_code  # type: ignore[attr-defined]
    raise error


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM becomes Terminated in the main thread: the command's clean-up runs (burn-in
    cancels its jobs and deletes its reservation), then kiln exits 143. A second SIGTERM while
    that runs is ignored, so it is not cut short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _TERMINATED.append(signum)
    raise Terminated()


# typer turns any KeyboardInterrupt into exit 130: this record tells a SIGTERM apart.
_TERMINATED: list[int] = []


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; the one place where errors become exit codes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        result = cli()(args=argv, prog_name="kiln", standalone_mode=False)
    except (Exception, KeyboardInterrupt) as error:
        sys.exit(_exit_code(error))
    if _TERMINATED and result == ExitCode.INTERRUPTED:
        sys.stderr.write("terminated (SIGTERM)\n")
        sys.exit(int(ExitCode.TERMINATED))
    sys.exit(int(result or 0))
