"""The one Jinja environment in which every template of a study runs, and its static checks.

Study files and template directories come from users and, in CI, from pull requests: a
template must not reach Python internals, nor make the machine that renders it build a
gigabyte string or a number of millions of digits. Templates run in Jinja's immutable
sandbox with StrictUndefined and no globals; operators and calls that could produce a huge
result are sized before they run and refused above a limit. Templates are also checked
statically before anything renders (unknown variables, parameters, filters and tests), so
`validate` reports a hostile or mistyped template without executing it.

Booleans print as `true`/`false`, as YAML, JSON and command lines spell them, not as
Python's `True`/`False`.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Iterable
from typing import Any

from jinja2 import BaseLoader, StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

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
    "tasks": "the tasks with trial-level defaults applied (image, command, args, env, resources, volume_mounts, "
    "env_from, node_selector, tolerations, policies, and pod: the pod fields with the task's affinity)",
    "gang_size": "pods that must start together (minAvailable)",
    "policies": "Volcano lifecycle policies",
    "tolerations": "the tolerations, as Kubernetes objects",
    "pod": "the trial's pod fields set, as Kubernetes names and objects (volumes, affinity, imagePullSecrets, "
    "securityContext, terminationGracePeriodSeconds)",
    "network_topology": "Volcano's networkTopology of the trial ({mode, highestTierAllowed}), empty when not set",
    "min_resources": "resources of the gang's minAvailable pods, summed (PodGroup minResources)",
    **VARIABLES,
}

_DELIMITERS = ("{{", "{%", "{#")


def is_template(text: str) -> bool:
    return any(d in text for d in _DELIMITERS)


# What one operation of a template may build: a manifest value is a few kilobytes at most.
MAX_LENGTH = 1_000_000  # characters of a string, items of a list
MAX_INT_BITS = 16_384  # about 4,900 decimal digits (Python prints at most 4,300)
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
_FORMAT_SPEC = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def display(value: Any) -> Any:
    """What `{{ value }}` prints: booleans as `true`/`false`, everything else as is."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value


def _concat(parts: Iterable[str]) -> str:
    """Join a template's output, refusing it once it passes MAX_LENGTH characters (a loop
    can repeat output that each operation alone keeps small)."""
    out, total = [], 0
    for part in parts:
        total += len(part)
        if total > MAX_LENGTH:
            raise _refuse("the template's output", f"{MAX_LENGTH:,} characters")
        out.append(part)
    return "".join(out)


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})
    concat = staticmethod(_concat)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:  # Jinja's signature
        # Nothing a study needs starts with an underscore; everything dangerous does.
        return not attr.startswith("_") and super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
        if op == "*":
            _check_product(left, right)
        elif op == "**":
            _check_power(left, right)
        elif op == "%" and isinstance(left, str):
            _check_format(left)
        return _BINOPS[op](left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # Jinja's signature
        if getattr(__obj, "__name__", None) in _PADDING_METHODS and isinstance(getattr(__obj, "__self__", None), str):
            for n in (*args, *kwargs.values()):
                _check_size(n, f"{__obj.__name__}()")
        return super().call(__context, __obj, *args, **kwargs)


_BINOPS = {"*": operator.mul, "**": operator.pow, "%": operator.mod}


def _refuse(what: str, limit: str) -> SecurityError:
    return SecurityError(f"refusing to compute {what}: the result would exceed {limit}")


def _check_size(n: Any, what: str) -> None:
    if isinstance(n, int) and n > MAX_LENGTH:
        raise _refuse(what, f"{MAX_LENGTH:,} characters")


def _check_product(left: Any, right: Any) -> None:
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_LENGTH:
            kind = "characters" if isinstance(seq, str) else "items"
            raise _refuse(f"a {type(seq).__name__} of {len(seq):,} times {n:,}", f"{MAX_LENGTH:,} {kind}")
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise _refuse("a product of two huge integers", f"{MAX_INT_BITS:,} bits")


def _check_power(base: Any, exp: Any) -> None:
    if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
        if exp * math.log2(abs(base)) > MAX_INT_BITS:
            raise _refuse(f"{_short(base)} ** {_short(exp)}", f"{MAX_INT_BITS:,} bits")


def _check_format(text: str) -> None:
    for width, precision in _FORMAT_SPEC.findall(text):
        for n in (width, precision):
            if n == "*" or (n and int(n) > MAX_LENGTH):
                raise _refuse(f"the format {text[:40]!r}", f"{MAX_LENGTH:,} characters")


def _short(n: int) -> str:
    return f"{n:,}" if n.bit_length() < 64 else f"an integer of {n.bit_length():,} bits"


def _bounded_filter(name: str, original: Any, size_args: tuple[int, ...]) -> Any:
    def bounded(*args: Any, **kwargs: Any) -> Any:
        for i in size_args:
            if i < len(args):
                _check_size(args[i], f"the filter {name}")
        for value in kwargs.values():
            _check_size(value, f"the filter {name}")
        if name == "format" and args and isinstance(args[0], str):
            _check_format(args[0])
        return original(*args, **kwargs)

    bounded.__name__ = original.__name__
    return bounded


def environment(loader: BaseLoader | None = None) -> ImmutableSandboxedEnvironment:
    env = _Sandbox(
        loader=loader,
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=display,
    )
    env.globals.clear()  # no range/cycler/joiner/lipsum/namespace: less to reach through
    # filters whose argument is the size of what they build (value first, then arguments)
    for name, sizes in (("center", (1,)), ("indent", (1,)), ("format", ())):
        env.filters[name] = _bounded_filter(name, env.filters[name], sizes)
    return env


def check(
    env: ImmutableSandboxedEnvironment,
    source: str | nodes.Template,
    allowed: Iterable[str],
    params: Iterable[str] | None = None,
    name: str | None = None,
) -> list[tuple[int, str]]:
    """Problems of a template as (template line, message); nothing is rendered.

    `allowed` are the variable names a template may use; `params`, when given, the
    parameter names that `params.X` / `params['X']` may name. `source` may be parsed already.
    """
    try:
        ast = source if isinstance(source, nodes.Template) else env.parse(source, name=name)
    except TemplateSyntaxError as e:
        return [(e.lineno or 1, f"template syntax error: {e.message}")]
    found = _unknown_filters(env, ast)
    if found:  # Jinja cannot even analyse a template with an unknown filter or test
        return found
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
            if (
                isinstance(node, nodes.Getattr | nodes.Getitem)
                and isinstance(node.node, nodes.Name)
                and node.node.name == "params"
            ):
                attr = _attribute(node)
                if attr is not None and not attr.startswith("_") and attr not in params:
                    found.append((node.lineno, f"unknown parameter 'params.{attr}'{_suggest(attr, params)}"))
    return sorted(set(found))


def _unknown_filters(env: ImmutableSandboxedEnvironment, ast: nodes.Template) -> list[tuple[int, str]]:
    found = []
    for kinds, known, what in ((nodes.Filter, env.filters, "filter"), (nodes.Test, env.tests, "test")):
        for node in ast.find_all(kinds):
            if node.name not in known:
                close = difflib.get_close_matches(node.name, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                found.append((node.lineno, f"unknown {what} {node.name!r}{hint}"))
    return found


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
            elif (
                isinstance(expr, nodes.Getattr)
                and _is_params(expr.node)
                and not hasattr(dict, expr.attr)
                and not expr.attr.startswith("_")
            ):
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
