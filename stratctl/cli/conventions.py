"""The command-line conventions every command follows, applied to the whole tree at once.

- Help names values the way people read them (FILE, N, SECONDS, TEXT, table|json|yaml),
  never as Python types (`<list[Path]>`, `<float>`): `tidy` gives every parameter a metavar
  and hides the type column.
- A usage error is one line, `error: ...`, with a hint `see stratctl CMD --help`, exit 2
  (`usage_error`), not a boxed usage panel.
- `--traceback` is accepted anywhere on the line, before or after the command (`hoist`).
"""

from __future__ import annotations

import sys
from typing import Any

SECONDS_WORDS = ("timeout", "interval", "settle", "seconds", "grace", "wait")


def metavar_for(param: Any) -> str:
    """The metavar of a parameter that has none, from its type and name."""
    desc = param.type_descriptor
    name = (param.name or "").lower()
    if desc.is_choice:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices or ())
    if desc.is_path:
        label = "DIR" if "dir" in name else "FILE"
    else:
        bare = param.bare_type().removeprefix("list[").removesuffix("]")
        if bare in ("int", "float"):
            label = "SECONDS" if any(w in name for w in SECONDS_WORDS) else "N"
        elif bare == "Path":
            label = "FILE"
        else:
            label = "TEXT"
    if param.param_type_name == "argument" and label not in ("FILE", "DIR"):
        label = name.upper()
    return label


def _no_type(ctx: Any) -> None:
    return None


def tidy(command: Any) -> None:
    """Give every parameter of `command` and its subcommands a readable metavar, and drop
    the Python type from help."""
    for param in getattr(command, "params", []):
        if not hasattr(param, "type_descriptor"):
            continue  # an older typer: click's own help, which names values by their click type
        if param.param_type_name == "option" and getattr(param, "is_flag", False):
            param.display_type_rich = _no_type
            continue
        if param.metavar is None:
            param.metavar = metavar_for(param)
        if param.param_type_name == "argument":
            param.display_type_rich = _no_type  # the name column already says what it is
    if not getattr(command, "_tidy", False):
        command._tidy = True
        make_help_option = command.get_help_option

        def get_help_option(ctx: Any) -> Any:
            option = make_help_option(ctx)
            if option is not None:
                option.display_type_rich = _no_type
            return option

        command.get_help_option = get_help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        tidy(sub)


def usage_error(error: Any) -> None:
    """Print a usage error as one line and a hint, on stderr."""
    ctx = getattr(error, "ctx", None)
    print(f"error: {error.format_message()}", file=sys.stderr)
    print(f"see {ctx.command_path if ctx is not None else 'stratctl'} --help", file=sys.stderr)


def hoist(args: list[str], flag: str = "--traceback") -> list[str]:
    """`args` with `flag` moved before the command wherever it was given (not after `--`)."""
    end = args.index("--") if "--" in args else len(args)
    if flag not in args[:end]:
        return args
    return [flag] + [a for a in args[:end] if a != flag] + args[end:]
