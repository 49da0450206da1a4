"""pydantic's validation errors in stratctl's words.

pydantic says "List should have at least 1 item after validation, not 0"; a study's author
should read "must list at least one value", and for a mistyped value the allowed one it
was probably meant to be. One table (`MESSAGES`) maps each pydantic error type met in
study files to a sentence; stratctl's own validators already speak plainly.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic_core import ErrorDetails

# pydantic's error types, in stratctl's words (ctx fields are filled in)
MESSAGES = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping of fields",
    "model_attributes_type": "must be a mapping of fields",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "too_short": "must list at least {min_length} values",
    "too_long": "must list at most {max_length} values",
    "string_too_short": "must be at least {min_length} characters long",
    "string_too_long": "must be at most {max_length} characters long",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "missing": "required field missing",
}
_SINGULAR = {
    "must list at least 1 values": "must list at least one value",
    "must list at most 1 values": "must list at most one value",
}
# the type a member of a union asks for, in the words of "must be X or Y"
ALTERNATIVES = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
}


def in_union(loc: tuple[Any, ...]) -> bool:
    # pydantic names the union member tried as the last segment: ('requests', 'cpu', 'int')
    return bool(loc) and loc[-1] in ("int", "float", "str", "bool") or (bool(loc) and "[" in str(loc[-1]))


def either(kinds: list[str]) -> str:
    return kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " or " + kinds[-1]


def shown(err: ErrorDetails) -> str:
    shown = err.get("input")
    if isinstance(shown, str | int | float | bool) and err["type"].endswith(("_type", "_parsing", "_from_float")):
        return f", got {shown!r}"
    return ""


def plain(err: ErrorDetails) -> str:
    """The error's message in stratctl's words, with a suggestion for a mistyped value."""
    kind, ctx = err["type"], err.get("ctx") or {}
    template = MESSAGES.get(kind)
    if template is None:  # stratctl's own validators (PydanticCustomError) speak plainly already
        return err["msg"].removeprefix("Value error, ")
    values = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in ctx.items()}
    message = template.format(**values) if ctx else template
    message = _SINGULAR.get(message, message)
    if kind in ("literal_error", "enum") and isinstance(err.get("input"), str):
        message += did_you_mean(err["input"], re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
    if kind in ("too_short", "too_long") and ctx.get("field_type") == "Dictionary":
        message = message.replace("list", "have").replace("values", "entries").replace("value", "entry")
    return message + shown(err)


def did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""
