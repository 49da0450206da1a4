"""A YAML document read together with the position of every key and value, and the
validation errors of its content located in it.

Study files are written by hand, so every problem must point at `FILE:LINE:COL`. PyYAML
throws positions away when it builds Python objects and silently keeps the last of two
equal keys; here the node tree is composed with the safe loader and walked by hand so
that positions survive, duplicate keys are reported, and alias bombs are refused before
anything is expanded. `-` as the path reads the document from standard input, named
`<stdin>` in problems.

Validation errors are told in stratctl's words (wording.py), not pydantic's, with the
closest allowed value suggested for a mistyped one.
"""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from stratctl.core import wording
from stratctl.errors import Problem, StudyError

MAX_BYTES = 1 << 20  # a study file is a page of YAML; a megabyte is already suspicious
MAX_ALIASES = 64  # anchors are handy for sharing a block or two, not for thousands
MAX_NODES = 200_000  # budget for the expanded tree (aliases count again each time used)

_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based, as editors count
    column: int  # 1-based

    @classmethod
    def of(cls, mark: yaml.Mark) -> Position:
        return cls(mark.line + 1, mark.column + 1)


@dataclass
class Document:
    """Plain data (dicts, lists, scalars) plus where each piece came from."""

    file: str
    data: Any
    keys: dict[Path_, Position] = field(default_factory=dict)  # where a key is written
    values: dict[Path_, Position] = field(default_factory=dict)  # where its value starts
    problems: list[Problem] = field(default_factory=list)  # duplicate keys, unsupported tags
    text: str | None = None  # the document as read

    def problem(self, path: Path_, message: str, at_key: bool = False) -> Problem:
        """A problem located at `path`, or at its nearest ancestor that exists."""
        path = tuple(path)
        while path:
            table = self.keys if at_key else self.values
            if path in table:
                pos = table[path]
                return Problem(self.file, pos.line, pos.column, message)
            # a missing field is reported at the mapping that lacks it: its key
            path, at_key = path[:-1], True
        pos = self.values.get((), Position(1, 1))
        return Problem(self.file, pos.line, pos.column, message)


class _Loader(yaml.SafeLoader):
    """The safe loader, counting aliases while composing (before any expansion)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:  # PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Refused(
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]  # untyped in PyYAML's stubs
                    f"too many YAML aliases (more than {MAX_ALIASES}); refusing to expand them",
                )
        return super().compose_node(parent, index)


class _Refused(Exception):
    def __init__(self, mark: yaml.Mark, message: str):
        self.mark = mark
        self.message = message


STDIN = "-"  # the path that means standard input
STDIN_NAME = "<stdin>"


def read(path: str | Path) -> Document:
    """Read and parse a YAML file (`-`: standard input); raises StudyError with located problems."""
    name = STDIN_NAME if str(path) == STDIN else str(path)
    try:
        if name == STDIN_NAME:
            raw = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise StudyError([Problem(name, None, None, f"cannot read the file: {e.strerror or e}")]) from e
    if len(raw) > MAX_BYTES:
        raise StudyError([Problem(name, None, None, f"the file is larger than {MAX_BYTES} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StudyError([Problem(name, None, None, f"the file is not UTF-8 text ({e.reason})")]) from e
    return parse(text, name)


def parse(text: str, file: str = "<string>") -> Document:
    """Parse YAML text into a Document.

    Raises StudyError when the text cannot be read as YAML at all; lesser problems
    (duplicate keys, unsupported tags) are collected in `Document.problems` so that they
    are reported together with the validation problems of the rest.
    """
    try:
        loader = _Loader(text)  # the reader already refuses control characters here
    except yaml.YAMLError as e:
        raise StudyError([_yaml_problem(file, e, text)]) from e
    try:
        try:
            root = loader.get_single_node()
        except _Refused as e:
            raise StudyError([Problem(file, e.mark.line + 1, e.mark.column + 1, e.message)]) from e
        except yaml.YAMLError as e:
            raise StudyError([_yaml_problem(file, e, text)]) from e
        if root is None:
            raise StudyError([Problem(file, 1, 1, "the file is empty: expected a study mapping")])
        walker = _Walker(loader, file)
        doc = Document(file, None, text=text)
        doc.data = walker.build(root, (), doc)
        doc.problems = walker.problems
        return doc
    finally:
        loader.dispose()


def _yaml_problem(file: str, e: yaml.YAMLError, text: str) -> Problem:
    tab = _tab(file, text, e)
    if tab is not None:  # YAML's own message ("found character '\\t' ...") hides the fix
        return tab
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        what = e.problem or e.context or "malformed YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        return Problem(file, line, col, f"malformed YAML: {what}")
    if isinstance(e, yaml.reader.ReaderError):
        # the reader counts characters from the start; editors want a line and a column
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        what = f" (character U+{e.character:04X})" if isinstance(e.character, int) else ""
        return Problem(file, line, column, f"malformed YAML: {e.reason}{what}")
    return Problem(file, None, None, f"malformed YAML: {e}")


def _tab(file: str, text: str, e: yaml.YAMLError) -> Problem | None:
    """A tab where YAML wants spaces: in the indentation of a line, or where parsing stopped."""
    for number, line in enumerate(text.splitlines(), 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip():
            return Problem(file, number, indent.index("\t") + 1, "a tab in the indentation: use spaces, not tabs")
    mark = getattr(e, "problem_mark", None)
    if mark is not None and 0 <= mark.index < len(text) and text[mark.index] == "\t":
        return Problem(file, mark.line + 1, mark.column + 1, "a tab where YAML needs spaces: use spaces, not tabs")
    return None


class _Walker:
    def __init__(self, loader: _Loader, file: str):
        self.loader = loader
        self.file = file
        self.nodes = 0
        self.problems: list[Problem] = []

    def _problem(self, mark: yaml.Mark, message: str) -> None:
        self.problems.append(Problem(self.file, mark.line + 1, mark.column + 1, message))

    def build(self, node: yaml.Node, path: Path_, doc: Document) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise StudyError(
                [
                    Problem(
                        self.file,
                        node.start_mark.line + 1,
                        node.start_mark.column + 1,
                        f"the document expands to more than {MAX_NODES} nodes (an alias bomb?)",
                    )
                ]
            )
        doc.values.setdefault(path, Position.of(node.start_mark))
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP:
                self._problem(node.start_mark, f"unsupported YAML tag {node.tag!r}")
                return None
            return self._mapping(node, path, doc)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                self._problem(node.start_mark, f"unsupported YAML tag {node.tag!r}")
                return None
            return [self.build(item, path + (i,), doc) for i, item in enumerate(node.value)]
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            self._problem(node.start_mark, f"cannot read this value: {getattr(e, 'problem', e)}")
            return None

    def _mapping(self, node: yaml.MappingNode, path: Path_, doc: Document) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self._problem(key_node.start_mark, "a key must be a plain string")
                continue
            if key_node.tag == "tag:yaml.org,2002:merge":
                self._problem(key_node.start_mark, "YAML merge keys (<<) are not supported")
                continue
            # Keys stay as written: YAML 1.1 would turn `on:` or `no:` into booleans.
            key = str(key_node.value)
            if key in first:
                what = "parameter" if path == ("space",) else "key"
                self._problem(
                    key_node.start_mark,
                    f"duplicate {what} {key!r} (first defined at line {first[key].line + 1})",
                )
                continue
            first[key] = key_node.start_mark
            doc.keys[path + (key,)] = Position.of(key_node.start_mark)
            out[key] = self.build(value_node, path + (key,), doc)
        return out


# ---------------------------------------------------------------- validation errors, located


def validation_problems(doc: Document, error: ValidationError, root: type) -> set[Problem]:
    """The errors of validating `doc.data` against the pydantic model `root`, located.

    A validator may name the offending field with `ctx={"field": "a.b"}` (relative to
    the error's location), so that e.g. "low must be below high" points at `low`.
    """
    problems: dict[Problem, None] = {}
    alternatives: dict[tuple[Any, ...], list[ErrorDetails]] = defaultdict(list)
    for err in error.errors():
        loc = tuple(err["loc"])
        if (
            err["type"] in wording.ALTERNATIVES
            and wording.in_union(loc)
            and len(_data_path(doc.data, loc, named_last=False)) == len(loc) - 1
        ):
            # one value against a union of types (a quantity: 2, 0.5 or "500m") fails each member,
            # named by the last segment of its loc, which is not a key of the data
            alternatives[_data_path(doc.data, loc[:-1])].append(err)
        else:
            problems[_problem(doc, err, root)] = None
    for path, errs in alternatives.items():
        kinds = list(dict.fromkeys(wording.ALTERNATIVES[e["type"]] for e in errs))
        where = ".".join(str(p) for p in path) or "study"
        shown = wording.shown(errs[0])
        problems[doc.problem(path, f"{where}: must be {wording.either(kinds)}{shown}")] = None
    return set(problems)


def _problem(doc: Document, err: ErrorDetails, root: type) -> Problem:
    loc = tuple(err["loc"])
    field = (err.get("ctx") or {}).get("field")
    path = _data_path(doc.data, loc, named_last=not field)
    if field:
        path = path + tuple(int(p) if p.isdigit() else p for p in field.split("."))
    where = ".".join(str(p) for p in path) or "study"
    kind = err["type"]
    if kind == "extra_forbidden":
        key = path[-1]
        known = _known_keys(root, loc)
        hint = difflib.get_close_matches(str(key), known, n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else (f" (known: {', '.join(known)})" if known else "")
        parent = ".".join(str(p) for p in path[:-1]) or "the study"
        return doc.problem(path, f"unknown key {key!r} in {parent}{suggestion}", at_key=True)
    if kind == "union_tag_invalid" or kind == "union_tag_not_found":
        tags = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected_tags", "")))
        tag = (err.get("ctx") or {}).get("tag")
        mistyped = wording.did_you_mean(tag, tags) if isinstance(tag, str) and kind == "union_tag_invalid" else ""
        return doc.problem(
            path + ("type",) if kind == "union_tag_invalid" else path,
            f"{where}: 'type' must be one of choice, uniform, loguniform, int{mistyped}",
        )
    return doc.problem(path, f"{where}: {wording.plain(err)}")


def _data_path(data: Any, loc: tuple[Any, ...], named_last: bool = True) -> tuple[Any, ...]:
    """The part of a pydantic `loc` that exists in the data; union tags are dropped.

    With `named_last`, a last segment absent from the data is kept: it names a missing
    or an unknown key.
    """
    path: list[Any] = []
    node = data
    for i, seg in enumerate(loc):
        if isinstance(node, dict) and seg in node:
            path.append(seg)
            node = node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            path.append(seg)
            node = node[seg]
        elif named_last and i == len(loc) - 1:
            path.append(seg)
    return tuple(path)


def _known_keys(root: type, loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at `loc[:-1]` accepts, following pydantic's loc through unions."""
    t: Any = root
    for seg in loc[:-1]:
        t = _unwrap(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            f = t.model_fields.get(seg) if isinstance(seg, str) else None
            if f is None:
                return []
            t = f.annotation
        elif typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        elif typing.get_origin(t) is list:
            t = typing.get_args(t)[0]
        elif typing.get_origin(t) in (Union, types.UnionType):
            members = [_unwrap(a) for a in typing.get_args(t)]
            match = [
                m
                for m in members
                if isinstance(m, type)
                and issubclass(m, BaseModel)
                and seg in (typing.get_args(m.model_fields["type"].annotation) if "type" in m.model_fields else ())
            ]
            if not match:
                return []
            t = match[0]
    t = _unwrap(t)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return sorted(t.model_fields)
    return []


def _unwrap(t: Any) -> Any:
    while True:
        origin = typing.get_origin(t)
        if origin is Annotated:
            t = typing.get_args(t)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) == 1:
                t = args[0]
            else:
                return t
        else:
            return t
