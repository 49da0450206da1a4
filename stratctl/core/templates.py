"""A study's templates compiled in the sandbox: its manifest template file (`load`, checked
statically first), its template strings (`string`, compiled once each; a string that only
interpolates variables is rendered without Jinja), and running either (`run`) with every
error located: at the template file's line, or where the study file writes the string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, Template, TemplateNotFound, TemplateSyntaxError, nodes
from jinja2.exceptions import TemplateError

from stratctl.core import sandbox
from stratctl.core.spec import Study
from stratctl.errors import Problem, StudyError


class Templates:
    """The template file and template strings of one study, from `directory`."""

    def __init__(self, study: Study, directory: Path):
        self.study = study
        self.dir = directory
        self.env = sandbox.environment(FileSystemLoader(str(directory)))
        self.env.policies["json.dumps_kwargs"] = {"sort_keys": False, "ensure_ascii": False}
        self.strings: dict[str, Template | Interpolation] = {}
        self.ast: nodes.Template | str = ""  # the loaded file's, parsed once (its source when it does not parse)

    def load(self, name: str) -> Template:
        file = (self.dir / name).resolve()
        if not file.is_relative_to(self.dir):
            raise StudyError(
                [
                    self.study.problem(
                        ("trial", "template"), f"template {name!r} escapes the templates directory {self.dir}"
                    )
                ]
            )
        try:
            assert self.env.loader is not None  # the environment is made with the templates' loader
            source, path, _ = self.env.loader.get_source(self.env, name)
        except TemplateNotFound:
            raise StudyError(
                [self.study.problem(("trial", "template"), f"template {name!r} not found in {self.dir}")]
            ) from None
        filename = path or name
        try:  # parsed once: for the checks, for _per_study and to compile
            self.ast = self.env.parse(source, name, filename)
        except TemplateSyntaxError:
            self.ast = source  # check() reports it
        allowed = set(sandbox.MANIFEST_VARIABLES)
        problems = [
            Problem(filename, line, None, msg)
            for line, msg in sandbox.check(self.env, self.ast, allowed, self.study.space, name=name)
        ]
        if problems:
            raise StudyError(problems)
        try:
            code = self.env.compile(self.ast, name, filename)
            return self.env.template_class.from_code(self.env, code, self.env.make_globals(None))
        except TemplateSyntaxError as e:  # already reported by check(); kept for includes
            raise StudyError(
                [Problem(e.filename or filename, e.lineno, None, f"template syntax error: {e.message}")]
            ) from e

    def string(self, text: str) -> Template | Interpolation:
        template = self.strings.get(text)
        if template is None:
            problems = sandbox.check(self.env, text, sandbox.VARIABLES, self.study.space)
            if problems:
                raise StudyError([self.string_problem(text, msg) for _, msg in problems])
            parts = sandbox.simple(self.env, text)
            template = Interpolation(parts) if parts is not None else self.env.from_string(text)
            self.strings[text] = template
        return template

    def string_problem(self, text: str, message: str) -> Problem:
        """A problem of a template string, at the place the study file writes it."""
        path = self.study.path_of(text)
        if path is None:  # not written in the study file as such (e.g. made by a template file)
            return Problem(self.study.file, None, None, f"in template {text!r}: {message}")
        return self.study.problem(path, f"{'.'.join(map(str, path))}: {message}")

    def run(self, template: Template | Interpolation, ctx: dict[str, Any]) -> str:
        try:
            return template.render(ctx)
        except (TemplateError, ArithmeticError, TypeError, ValueError, LookupError, OverflowError) as e:
            kind = "not allowed" if isinstance(e, sandbox.SecurityError) else "failed"
            message = f"rendering {kind}{_for_trial(ctx)}: {e}"
            if template.name is not None:  # a template file (a string of the study has no name)
                filename = template.filename or template.name
                raise StudyError([Problem(filename, _template_line(e, filename), None, message)]) from e
            raise StudyError([self.string_problem(_source_of(template, self.strings), message)]) from e


def _for_trial(ctx: dict[str, Any]) -> str:
    index = ctx.get("index")
    return f" for trial {index} ({ctx.get('trial')})" if isinstance(index, int) else ""


_display = sandbox.display


class Interpolation:
    """A template string that only interpolates variables, rendered without Jinja
    (see sandbox.simple); renders exactly what Jinja would."""

    name = filename = None

    def __init__(self, parts: list[str | tuple[str, ...]]):
        self.parts = parts

    def render(self, ctx: dict[str, Any]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif len(part) == 1:
                out.append(str(_display(ctx[part[0]])))
            else:
                out.append(str(_display(ctx["params"][part[1]])))
        return "".join(out)


def _template_line(exc: BaseException, filename: str) -> int | None:
    line = getattr(exc, "lineno", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _source_of(template: Template | Interpolation, cache: dict[str, Template | Interpolation]) -> str:
    return next((text for text, t in cache.items() if t is template), "<template>")
