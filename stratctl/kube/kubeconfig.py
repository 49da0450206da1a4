"""The contexts of a kubeconfig file, read as YAML (without loading the Kubernetes client:
shell completion lists them on every Tab)."""

from __future__ import annotations

import os

import yaml


def kubeconfig_path(kubeconfig: str | None) -> str:
    """The file kubectl would read: --kubeconfig, the first of $KUBECONFIG, ~/.kube/config."""
    return kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


def context_names(kubeconfig: str | None) -> list[str]:
    """The context names of the kubeconfig, in file order; none when it cannot be read."""
    try:
        with open(kubeconfig_path(kubeconfig)) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return []
    contexts = data.get("contexts") if isinstance(data, dict) else None
    return [c["name"] for c in contexts or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]
