"""The `stratctl` application: registers the commands and turns errors into exit codes.

Every StratctlError becomes its message on stderr (red on a terminal) and the exit code
of its class, without a traceback; `--traceback` or STRATCTL_TRACEBACK=1 re-raises it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

try:  # typer 0.29 carries its own copy of click
    from typer._click.core import Context
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click.core import Context  # type: ignore[assignment]
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]
from typer.core import TyperGroup

from stratctl import __version__
from stratctl.cli import conventions
from stratctl.errors import ExitCode, StratctlError, StudyError

if TYPE_CHECKING:
    from rich.console import Console

# pydantic looks for plugins in every installed package's metadata when it builds the first
# model (20 ms of each start, completion included); stratctl's models use none.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# Command modules, each exposing a function of the same name (`plan.plan`, ...). They import
# their work inside the command, so `stratctl --help` and `status` do not load the renderer,
# pydantic models and the submit loop.
# A module registers its commands with `register(app)` when it has several (drain, resume).
COMMANDS = [
    "validate",
    "render",
    "plan",
    "schema",
    "submit",
    "status",
    "drain",
    "wait",
    "delete",
    "logs",
    "report",
    "rbac",
    "dashboard",
]


def report(error: StratctlError, console: Console | None = None) -> None:
    from rich.console import Console  # imported when needed: rich costs 25 ms of every start

    console = console or Console(stderr=True, highlight=False, soft_wrap=True)
    if isinstance(error, StudyError):
        lines = [str(p) for p in error.problems]
        if len(lines) > 1:
            lines.append(f"{len(lines)} problems")
    else:
        lines = [f"error: {error}"]
    for line in lines:
        console.print(line, style="red", markup=False)


class _Group(TyperGroup):
    """Maps errors raised by any command to a message and an exit code, and applies the
    command-line conventions (`conventions`) to every command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conventions.tidy(self)

    def get_params(self, ctx: Any) -> list[Any]:
        conventions.tidy(self)  # typer adds --install-completion and --show-completion after __init__
        return super().get_params(ctx)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, conventions.hoist(list(args)), parent, **extra)
        except UsageError as e:
            if isinstance(e, NoArgsIsHelpError):
                raise
            conventions.usage_error(e)
            raise typer.Exit(int(ExitCode.INVALID_INPUT)) from None

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as e:  # a command's own arguments
            conventions.usage_error(e)
            raise typer.Exit(int(ExitCode.INVALID_INPUT)) from None
        except StratctlError as e:
            if _wants_traceback(ctx):
                raise
            report(e)
            raise typer.Exit(int(e.exit_code)) from None
        except KeyboardInterrupt:
            if _wants_traceback(ctx):
                raise
            from rich.console import Console

            Console(stderr=True).print("interrupted: rerun the same command to resume", style="yellow")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def _wants_traceback(ctx: Context) -> bool:
    return bool((ctx.obj or {}).get("traceback")) or os.environ.get("STRATCTL_TRACEBACK") == "1"


def _application() -> typer.Typer:
    return typer.Typer(
        name="stratctl",
        cls=_Group,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",  # help paragraphs reflow to the terminal: their line breaks are only the source's
        context_settings={"help_option_names": ["-h", "--help"]},
        help=(
            "Launch strategy-parallel searches (hyperparameter sweeps) onto Kubernetes with Volcano, "
            "Slurm or YARN: throttled, exactly once, resumed from checkpoints."
        ),
    )


app = _application()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"stratctl {__version__}")
        raise typer.Exit()


def root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    traceback: Annotated[
        bool,
        typer.Option(
            "--traceback", envvar="STRATCTL_TRACEBACK", help="Show the Python traceback of errors (for bug reports)."
        ),
    ] = False,
) -> None:
    ctx.obj = {"traceback": traceback}


def _register(application: typer.Typer, modules: list[str]) -> typer.Typer:
    application.callback()(root)
    for name in modules:
        module = importlib.import_module(f"stratctl.cli.{name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(application)
        else:
            application.command(name=name)(getattr(module, name))
    return application


_register(app, COMMANDS)
# the command names that are not their module's name
_MODULE_OF = {"resume": "drain"}


def _one_command(args: list[str]) -> typer.Typer:
    """The application for `args`: when they run one command, an application of that command
    alone, so only its parameters are built (typer builds every registered command's, each
    annotation evaluated: 40-80 ms of every start); `app`, with every command, otherwise
    (`stratctl`, `--help`, an unknown command)."""
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-"):  # the root's options are flags: the first word is the command
            continue
        module = _MODULE_OF.get(arg, arg)
        if module not in COMMANDS:
            break
        application = _register(_application(), [module])
        application.registered_commands = [
            c for c in application.registered_commands if (c.name or getattr(c.callback, "__name__", None)) == arg
        ]
        return application
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else argv
    traceback = "--traceback" in args or os.environ.get("STRATCTL_TRACEBACK") == "1"
    try:
        _one_command(args)(args=args, prog_name="stratctl")
    except SystemExit:
        raise
    except StratctlError as e:  # raised outside a command (e.g. while parsing)
        if traceback:
            raise
        report(e)
        sys.exit(int(e.exit_code))
    except KeyboardInterrupt:
        sys.exit(int(ExitCode.INTERRUPTED))
    except BrokenPipeError:  # `stratctl render ... | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(int(ExitCode.FAILURE))
    except Exception as e:  # a bug: say so briefly, keep the traceback for --traceback
        if traceback:
            raise
        from rich.console import Console

        Console(stderr=True).print(
            f"internal error: {type(e).__name__}: {e} (rerun with --traceback to see where)", style="red", markup=False
        )
        sys.exit(int(ExitCode.FAILURE))


if __name__ == "__main__":
    main()
