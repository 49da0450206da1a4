"""The contexts of a kubeconfig file, read as YAML (without loading the Kubernetes client:
shell completion lists them on every Tab), and what is wrong when the context asked for is
not one of them."""

from __future__ import annotations

import os
from typing import Any

import yaml

from stratctl.errors import UsageError

# libyaml's safe loader where PyYAML has it: a kubeconfig with embedded certificates is read
# in a fraction of the pure-Python loader's time (14 ms for the testbed's), on every command
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def kubeconfig_path(kubeconfig: str | None) -> str:
    """The file kubectl would read: --kubeconfig, the first of $KUBECONFIG, ~/.kube/config."""
    return kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


def read_kubeconfig(path: str) -> Any:
    """The kubeconfig at `path` as data (safe YAML: tags that construct objects are refused)."""
    with open(path) as f:
        return yaml.load(f, Loader=_Loader)


def context_names(kubeconfig: str | None) -> list[str]:
    """The context names of the kubeconfig, in file order; none when it cannot be read."""
    try:
        data = read_kubeconfig(kubeconfig_path(kubeconfig))
    except (OSError, yaml.YAMLError):
        return []
    contexts = data.get("contexts") if isinstance(data, dict) else None
    return [c["name"] for c in contexts or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]


class UnknownContext(UsageError):
    """The context asked for (or the current one) is not among the kubeconfig's contexts."""


def _names(config: dict[str, Any]) -> list[str]:
    contexts = config.get("contexts")
    return [c["name"] for c in contexts or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]


def context_problem(config: Any, path: str, context: str | None) -> str | None:
    """What is wrong with choosing `context` (None: the current one) in the kubeconfig at
    `path` read as `config`, said with the contexts there are and the nearest name; None
    when it is there (or the file is not a kubeconfig at all: its reader says so)."""
    if not isinstance(config, dict):
        return None
    names = _names(config)
    there = f"its contexts: {', '.join(names)}" if names else "it has no contexts"
    if context is not None:
        if context in names:
            return None
        return f"no context {context!r} in the kubeconfig {path} (--context){_near(context, names)}; {there}"
    current = config.get("current-context")
    if not current:
        return f"the kubeconfig {path} sets no current context: choose one with --context; {there}"
    if current in names:
        return None
    near = _near(current, names)
    return f"the current context {current!r} of the kubeconfig {path} is not one of its contexts{near}; {there}"


def _near(word: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
