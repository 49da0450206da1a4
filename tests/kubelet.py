"""What a container of a pod sees when it starts, worked out from the pod's objects the way the
kubelet does it (KWOK runs no process, so the tests of the rendezvous contract on Kubernetes
start its commands here): the environment (`value`, downward-API `fieldRef`, `$(NAME)`
references to earlier variables, `$$` for `$`), then the command, run for real when it is a
`/bin/sh -c` script, with `env` in place of the trial's program so that what it exports shows.
"""

from __future__ import annotations

import os
import re
import subprocess

_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(NAME)` expansion: a defined NAME is replaced, `$$` is `$`, anything
    else stays as written (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else f"$({name})")
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def field(pod: dict, path: str) -> str:
    meta = pod.get("metadata") or {}
    match = _FIELD.fullmatch(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if path == "metadata.name":
        return meta.get("name", "")
    if path == "metadata.namespace":
        return meta.get("namespace", "")
    raise AssertionError(f"a field path this helper does not resolve: {path}")


def environment(pod: dict, container: dict) -> dict[str, str]:
    """The container's environment variables as the kubelet sets them, in order (a
    configMapKeyRef, which only Volcano's own variables use, is left out)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = expand(str(entry["value"]), env)
        elif "fieldRef" in (entry.get("valueFrom") or {}):
            env[entry["name"]] = field(pod, entry["valueFrom"]["fieldRef"]["fieldPath"])
    return env


def started(pod: dict, container: dict) -> dict[str, str]:
    """The environment the container's program runs with: its command's `/bin/sh -c` script
    run for real when it has one (up to the program, which is replaced by `env`)."""
    env = environment(pod, container)
    command = [expand(word, env) for word in container.get("command") or []]
    if command[:2] != ["/bin/sh", "-c"]:
        return env
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # the image's, in a real container
    done = subprocess.run(command[:4] + ["env"], env={**path, **env}, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise AssertionError(f"the container's script failed ({done.returncode}): {done.stderr}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
