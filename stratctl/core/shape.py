"""Trial shapes: the pods of a trial's gang and the GPUs each asks for.

A study may let the shape vary from trial to trial: a task's `replicas` and the GPU
request (of `trial.resources` or of a task) may be templates over the trial's values,
e.g. `replicas: "{{ params.workers }}"`. They are checked statically when the study is
loaded (the variables exist), and per trial here: `resolve` takes each one's rendered
text for a trial, checks it as the study file's own numbers are checked (replicas 1 to
10,000, a whole number of GPUs, `min_available` within the gang) and returns the study
with the numbers filled in, from which that trial's manifests are rendered like any
study's. A problem names the field in the study file and the trial.
"""

from __future__ import annotations

from typing import Any

from stratctl.core import sandbox
from stratctl.core.quantity import GPU
from stratctl.core.spec import Study
from stratctl.core.trialspec import MAX_REPLICAS, Resources
from stratctl.errors import StudyError

Path = tuple[str | int, ...]


def fields(study: Study) -> list[tuple[Path, str]]:
    """The shape fields of the study that are templates: (path in the study file, text)."""
    found: list[tuple[Path, str]] = []
    for where, resources in _resources(study):
        for kind in ("requests", "limits"):
            value = getattr(resources, kind).get(GPU)
            if isinstance(value, str) and sandbox.is_template(value):
                found.append((where + (kind, GPU), value))
    for i, task in enumerate(study.trial.tasks):
        if isinstance(task.replicas, str):
            found.append((("trial", "tasks", i, "replicas"), task.replicas))
    return found


def _resources(study: Study) -> list[tuple[Path, Resources]]:
    out: list[tuple[Path, Resources]] = [(("trial", "resources"), study.trial.resources)]
    out += [(("trial", "tasks", i, "resources"), t.resources) for i, t in enumerate(study.trial.tasks) if t.resources]
    return out


def resolve(study: Study, rendered: dict[Path, str], trial: str) -> Study:
    """The study with its shape templates replaced by their values for one trial.

    `rendered`: each path of `fields(study)` → its text rendered for the trial; `trial`
    says which trial in messages (e.g. "trial 3 (demo-1a2b3c4d5e)")."""
    problems, values = [], {}
    for path, text in rendered.items():
        what = "replicas" if path[-1] == "replicas" else f"{path[-2]} of {GPU}"
        low = 1 if path[-1] == "replicas" else 0
        high = MAX_REPLICAS if path[-1] == "replicas" else 1_000
        number = _whole(text)
        copied = path[-2] == "limits" and rendered.get(path[:-2] + ("requests", GPU)) == text
        if (number is None or not low <= number <= high) and not copied:  # a limit filled from the request: said once
            problems.append(
                study.problem(
                    path,
                    f"{'.'.join(map(str, path))}: {what} renders to {text.strip()!r} for "
                    f"{trial}: expected a whole number from {low} to {high:,}",
                )
            )
        elif number is not None:
            values[path] = number
    if problems:
        raise StudyError(problems)
    tasks = []
    for i, task in enumerate(study.trial.tasks):
        update: dict[str, Any] = {}
        if ("trial", "tasks", i, "replicas") in values:
            update["replicas"] = values[("trial", "tasks", i, "replicas")]
        if task.resources is not None:
            update["resources"] = _filled(task.resources, ("trial", "tasks", i, "resources"), values)
        tasks.append(task.model_copy(update=update))
    trial_spec = study.trial.model_copy(
        update={"tasks": tasks, "resources": _filled(study.trial.resources, ("trial", "resources"), values)}
    )
    shaped = study.model_copy(update={"trial": trial_spec})
    shaped.__dict__.pop("spec_hash", None)  # the study's hash is the file's, not one trial's
    _check(shaped, trial)
    return shaped


def _filled(resources: Resources, where: Path, values: dict[Path, int]) -> Resources:
    requests, limits = dict(resources.requests), dict(resources.limits)
    if where + ("requests", GPU) in values:
        requests[GPU] = values[where + ("requests", GPU)]
    if where + ("limits", GPU) in values:
        limits[GPU] = values[where + ("limits", GPU)]
    return resources.model_copy(update={"requests": requests, "limits": limits})


def _whole(text: str) -> int | None:
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def _check(study: Study, trial: str) -> None:
    """What the study file's validation checks of fixed numbers, for one trial's."""
    problems = []
    for i, task in enumerate(study.trial.tasks):
        if task.min_available is not None and task.min_available > task.pods:
            problems.append(
                study.problem(
                    ("trial", "tasks", i, "min_available"),
                    f"trial.tasks.{i}.min_available: {task.min_available} exceeds the "
                    f"{task.replicas} replicas of {trial}",
                )
            )
        resources = study.task_resources(task)
        request, limit = resources.requests.get(GPU), resources.limits.get(GPU)
        if request is not None and limit is not None and str(request) != str(limit):
            problems.append(
                study.problem(
                    ("trial", "resources"),
                    f"{GPU} cannot be overcommitted: for {trial} its "
                    f"limit ({limit}) differs from its request ({request})",
                )
            )
    total = sum(t.pods for t in study.trial.tasks)
    if study.trial.min_available is not None and study.trial.min_available > total:
        problems.append(
            study.problem(
                ("trial", "min_available"),
                f"trial.min_available: {study.trial.min_available} exceeds the {total} pods of {trial}",
            )
        )
    if problems:
        raise StudyError(problems)


def gang(study: Study) -> tuple[int, ...]:
    """GPUs of each pod of one trial of a study with fixed numbers (or resolved for a trial):
    the shape free GPUs must hold for it to start."""
    return tuple(study.task_resources(t).gpus() for t in study.trial.tasks for _ in range(t.pods))
