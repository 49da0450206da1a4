"""The one error hierarchy of stratctl and the exit codes the CLI maps it to.

Every failure a user can cause or meet is a `StratctlError` with a readable message;
the CLI turns it into one line (or one line per problem) on stderr and an `ExitCode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # some trials failed, or an unexpected error
    INVALID_INPUT = 2  # the study file or the command line is wrong
    CLUSTER = 3  # the cluster refused or could not be reached
    CONFLICT = 4  # objects in the cluster disagree with the study (spec-hash mismatch, study changed)
    TIMEOUT = 124  # --timeout passed before the study finished (as GNU timeout); trials keep running
    INTERRUPTED = 130  # Ctrl-C: stopped cleanly, rerun the same command to resume


class StratctlError(Exception):
    """Base of every error stratctl reports to a user."""

    exit_code: ExitCode = ExitCode.FAILURE


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file, located for editors (`FILE:LINE:COL`)."""

    file: str
    line: int | None
    column: int | None
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.message}"


class StudyError(StratctlError):
    """The study file (or a template it uses) is invalid; carries every problem found."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(StratctlError):
    """A command-line option or combination of options is wrong."""

    exit_code = ExitCode.INVALID_INPUT


class ClusterError(StratctlError):
    """The API server refused a request or could not be reached."""

    exit_code = ExitCode.CLUSTER

    def __init__(self, message: str, status: int | None = None, reason: str | None = None):
        self.status = status
        self.reason = reason
        super().__init__(message)


class Throttled(ClusterError):
    """HTTP 429 (or 503) from the API server; `retry_after` is its Retry-After in seconds."""

    def __init__(self, message: str, status: int = 429, retry_after: float | None = None):
        self.retry_after = retry_after
        super().__init__(message, status=status, reason="TooManyRequests")


class Unavailable(ClusterError):
    """A transient failure: connection error, timeout, a 5xx other than throttling, or a
    401/403 on a request that worked moments before (a restarting API server)."""


class Reconnect(Unavailable):
    """A request cut because its connection died while the server answers again on new
    ones (a network change): sent again at once, with no backoff, and no sign of an outage."""


class Unreachable(ClusterError):
    """The API server has not answered for longer than the command waits: giving up.

    Not an `Unavailable`, so nothing retries it: it ends the command (exit 3)."""


class StillThrottled(ClusterError):
    """The API server refused every request of this user (429) for longer than the command
    waits: giving up. Not a `Throttled`, so nothing retries it: it ends the command (exit 3)."""


class AlreadyExists(ClusterError):
    """HTTP 409: an object of that name exists."""

    def __init__(self, message: str):
        super().__init__(message, status=409, reason="AlreadyExists")


class Invalid(ClusterError):
    """HTTP 422 (or another permanent 4xx): the server rejected the object; retrying won't help."""


class NotFound(ClusterError):
    def __init__(self, message: str):
        super().__init__(message, status=404, reason="NotFound")


def transient(error: BaseException) -> bool:
    """A pause, not a verdict: the same request may well succeed a little later."""
    return isinstance(error, (Unavailable, Throttled))


class SpecConflict(StratctlError):
    """A trial of the same name exists in the cluster with a different spec hash."""

    exit_code = ExitCode.CONFLICT


class StudyChanged(StratctlError):
    """The study was edited since it was submitted and the edit changes trials already in the
    cluster: refused unless the user asks for `--rerun-changed` (or renames the study)."""

    exit_code = ExitCode.CONFLICT


class StudyDeleted(StratctlError):
    """`stratctl delete` took the study out while this submit followed it (`--force`)."""


class Unsupported(UsageError):
    """A command or option the study's backend cannot do: refused in one line naming the backend."""


class StudyMoved(StratctlError):
    """A study on a batch scheduler whose trials' marks are where an older stratctl put them
    (its output_dir resolved against the working directory), not in its study directory:
    submitting it would send again the trials the scheduler has forgotten."""

    exit_code = ExitCode.CONFLICT
