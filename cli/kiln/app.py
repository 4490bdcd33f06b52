"""The root Typer app: registers one module per command and maps domain errors to exit codes."""

from __future__ import annotations

import sys

import click
import typer

from kiln import __version__
from kiln.console import err, safe
from kiln.errors import ExitCode, KilnError

app = typer.Typer(
    name="kiln",
    help=(
        "Turn racks of bare-metal GPU servers into a validated Slurm GPU cluster.\n\n"
        "Exit codes: 0 success; 1 something failed; 2 invalid input (nothing touched); "
        "3 environment or precondition; 4 changes pending (plan --detailed-exitcode); "
        "130 interrupted."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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


def _register() -> None:
    # Imported here so `kiln --help` stays fast and each command stays in its own module.
    from kiln.commands import init, plan, validate

    app.command("validate")(validate.validate)
    app.command("plan")(plan.plan)
    app.command("init")(init.init)

    from kiln.commands import sandbox

    app.add_typer(sandbox.app, name="sandbox")

    from kiln.commands import facts, provision, unlock

    app.command("provision")(provision.provision)
    app.command("unlock")(unlock.unlock)
    app.command("facts")(facts.facts)

    from kiln.commands import report

    app.command("report")(report.report)

    from kiln.commands import burnin

    app.command("burnin")(burnin.burnin)

    from kiln.commands import exec_

    app.command("exec")(exec_.exec_)

    from kiln.commands import health

    app.command("health")(health.health)

    from kiln.commands import drain, inspect, resume, slurm, status

    app.command("drain")(drain.drain)
    app.command("resume")(resume.resume)
    app.command("inspect")(inspect.inspect)
    app.command("status")(status.status)
    app.add_typer(slurm.app, name="slurm")

    from kiln.commands import fabric

    app.add_typer(fabric.app, name="fabric")

    from kiln.commands import power

    app.add_typer(power.app, name="power")


_register()


def _click_classes(name: str) -> tuple[type[BaseException], ...]:
    """click's exception class `name`, and the copy typer carries of it: recent typer releases
    vendor click as typer._click, and raise those classes instead of click's own."""
    classes = [getattr(click.exceptions, name)]
    try:
        from typer._click import exceptions as vendored
    except ImportError:
        return tuple(classes)
    if hasattr(vendored, name):
        classes.append(getattr(vendored, name))
    return tuple(classes)


ABORT = _click_classes("Abort")
USAGE_ERROR = _click_classes("UsageError")
CLICK_ERROR = _click_classes("ClickException")
CLICK_EXIT = _click_classes("Exit")


def _usage_line(error: BaseException) -> str:
    """One line: what was wrong and where to look, e.g. "No such command 'x'" + the help hint."""
    ctx = getattr(error, "ctx", None)
    where = ctx.command_path if ctx is not None else "kiln"
    return f"{error.format_message()} (see `{where} --help`)"  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; the one place where errors become exit codes."""
    try:
        result = app(args=argv, standalone_mode=False)
    except KilnError as error:
        err.print(f"[bold red]error:[/] {safe(error.message)}")
        if error.hint:
            err.print(f"  hint: {safe(error.hint)}")
        sys.exit(int(error.exit_code))
    except (*ABORT, KeyboardInterrupt):
        err.print("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except USAGE_ERROR as error:
        err.print("[bold red]error:[/] ", end="")
        err.print(_usage_line(error), markup=False, highlight=False)
        sys.exit(int(ExitCode.INVALID_INPUT))
    except CLICK_ERROR as error:
        error.show()  # type: ignore[attr-defined]
        sys.exit(error.exit_code)  # type: ignore[attr-defined]
    except CLICK_EXIT as exit_:
        sys.exit(exit_.exit_code)  # type: ignore[attr-defined]
    sys.exit(int(result or 0))
