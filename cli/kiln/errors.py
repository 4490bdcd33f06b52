"""Exit codes and the domain errors that map onto them.

Commands raise these; `kiln.app` turns them into an exit code in one place.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # hosts, checks or burn-in failed
    INVALID_INPUT = 2  # invalid input or usage; nothing was touched
    ENVIRONMENT = 3  # environment or precondition: lock held, Docker or Ansible missing
    CHANGES_PENDING = 4  # `kiln plan --detailed-exitcode` only
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    TERMINATED = 143  # SIGTERM (a pipeline cancelled, a service stopped)


class KilnError(Exception):
    """Base of the errors kiln reports to the user without a traceback."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InvalidInputError(KilnError):
    exit_code = ExitCode.INVALID_INPUT


class EnvironmentProblem(KilnError):
    exit_code = ExitCode.ENVIRONMENT


class OperationFailed(KilnError):
    exit_code = ExitCode.FAILED


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so every clean-up written for Ctrl-C runs too."""
