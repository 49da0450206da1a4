"""The one Jinja environment in which every template of a study runs, and its static checks.

Study files and template directories come from users and, in CI, from pull requests: a
template must not reach Python internals. Templates run in Jinja's immutable sandbox with
StrictUndefined and no globals, and are also checked statically before anything renders,
so `validate` reports a hostile or mistyped template without executing it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from jinja2 import BaseLoader, StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

__all__ = ["SecurityError", "TemplateSyntaxError", "VARIABLES", "check", "environment", "is_template"]

# What a template may refer to; render.py fills them for each trial attempt.
VARIABLES = {
    "params": "the trial's parameters, e.g. params.lr",
    "study": "the study name",
    "namespace": "the study namespace",
    "trial": "the trial name (attempt-independent)",
    "job": "the name of this attempt's job",
    "attempt": "the attempt number (0, 1, ...)",
    "index": "the trial index",
    "checkpoint": "the trial's checkpoint location",
    "resume": "true when the attempt resumes from a checkpoint",
}
# The manifest templates (templates/*.j2) also see the study model itself.
MANIFEST_VARIABLES = {
    "spec": "the study file's fields, with defaults filled in",
    "tasks": "the tasks with trial-level defaults applied (image, command, args, env, resources)",
    "gang_size": "pods that must start together (minAvailable)",
    "policies": "Volcano lifecycle policies",
    "tolerations": "the tolerations, as Kubernetes objects",
    "min_resources": "resources of the gang's minAvailable pods, summed (PodGroup minResources)",
    **VARIABLES,
}

_DELIMITERS = ("{{", "{%", "{#")


def is_template(text: str) -> bool:
    return any(d in text for d in _DELIMITERS)


class _Sandbox(ImmutableSandboxedEnvironment):
    def is_safe_attribute(self, obj, attr, value):  # noqa: ANN001 - Jinja's signature
        # Nothing a study needs starts with an underscore; everything dangerous does.
        return not attr.startswith("_") and super().is_safe_attribute(obj, attr, value)


def environment(loader: BaseLoader | None = None) -> ImmutableSandboxedEnvironment:
    env = _Sandbox(
        loader=loader,
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.clear()  # no range/cycler/joiner/lipsum/namespace: less to reach through
    return env


def check(
    env: ImmutableSandboxedEnvironment,
    source: str,
    allowed: Iterable[str],
    params: Iterable[str] | None = None,
    name: str | None = None,
) -> list[tuple[int, str]]:
    """Problems of a template as (template line, message); nothing is rendered.

    `allowed` are the variable names a template may use; `params`, when given, the
    parameter names that `params.X` / `params['X']` may name.
    """
    try:
        ast = env.parse(source, name=name)
    except TemplateSyntaxError as e:
        return [(e.lineno or 1, f"template syntax error: {e.message}")]
    found: list[tuple[int, str]] = []
    private = [n for n in ast.find_all((nodes.Getattr, nodes.Getitem)) if (_attribute(n) or "x")[0] == "_"]
    if private:
        names = ", ".join(sorted({repr(_attribute(n)) for n in private}))
        found.append((private[0].lineno, f"template accesses {names}: private attributes are not allowed"))
    allowed = set(allowed)
    for var in sorted(meta.find_undeclared_variables(ast) - allowed):
        found.append((_first_use(ast, var), f"unknown template variable {var!r}{_suggest(var, allowed)}"))
    if params is not None:
        params = set(params)
        for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
            if isinstance(node.node, nodes.Name) and node.node.name == "params":
                attr = _attribute(node)
                if attr is not None and not attr.startswith("_") and attr not in params:
                    found.append((node.lineno, f"unknown parameter 'params.{attr}'{_suggest(attr, params)}"))
    return sorted(set(found))


def simple(env: ImmutableSandboxedEnvironment, source: str) -> list[str | tuple[str, ...]] | None:
    """A template that only interpolates variables (`--lr={{ params.lr }}`), as parts:
    literal strings and variable paths; None for anything more complex.

    Such templates are most of a study's; joining the parts gives exactly what Jinja
    renders (str() of each value) at a fraction of the cost of a Jinja render call.
    """
    try:
        body = env.parse(source).body
    except TemplateSyntaxError:
        return None
    parts: list[str | tuple[str, ...]] = []
    for output in body:
        if not isinstance(output, nodes.Output):
            return None
        for expr in output.nodes:
            if isinstance(expr, nodes.TemplateData):
                parts.append(expr.data)
            elif isinstance(expr, nodes.Name) and expr.name in VARIABLES and expr.name != "params":
                parts.append((expr.name,))
            elif (isinstance(expr, nodes.Getattr) and _is_params(expr.node)
                  and not hasattr(dict, expr.attr) and not expr.attr.startswith("_")):
                parts.append(("params", expr.attr))
            else:
                return None
    return parts


def _is_params(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "params"


def _attribute(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Getattr):
        return node.attr
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
        return node.arg.value
    return None


def _first_use(ast: nodes.Template, var: str) -> int:
    for node in ast.find_all(nodes.Name):
        if node.name == var:
            return node.lineno
    return 1


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(choices))})"
