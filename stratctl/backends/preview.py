"""What `submit` would send for an attempt of each trial, as its backend sends it (what
`stratctl render` shows), built offline: the manifests on Kubernetes, the sbatch script on
Slurm, the application submission request on YARN.

One function a backend chooses what to show; each builds exactly what that backend's
scheduler builds (backends/slurm/script.py, backends/yarn/app.py) from the same rendering of the attempt.
What only the cluster knows at submit time is a placeholder, said in `notes`: a YARN
application's id (and what derives from it), the ResourceManager's classpath when the
study does not set `yarn.classpath`, the AM jar's size and time when the jar is not built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stratctl.backends import rendezvous_for
from stratctl.core.render import Renderer, bundled_templates
from stratctl.core.space import Trial, attempt_name
from stratctl.core.spec import Study
from stratctl.errors import UsageError

APP_ID = "<application-id>"  # a YARN application's id: the ResourceManager's answer to new-application
FROM_APP_ID = "<derived from the application id>"
CLASSPATH = "<the ResourceManager's yarn.application.classpath>"


@dataclass(frozen=True)
class Submission:
    """One attempt as its backend sends it."""

    name: str  # the attempt's name (a file's name without its suffix)
    data: Any  # what is sent, as data: the manifests (a list), or one mapping
    script: str | None = None  # its text, for a backend that sends a script (Slurm's sbatch)


@dataclass
class Preview:
    """Builds the submissions of a study's attempts: `formats` says in which forms they
    can be shown (the first is the backend's own), `notes` what is a placeholder."""

    study: Study
    renderer: Renderer
    formats: tuple[str, ...]
    build: Callable[[Trial, list[dict[str, Any]], int], Submission]
    notes: list[str] = field(default_factory=list)

    def render(self, trials: list[Trial], attempt: int = 0, resume: bool = False) -> list[Submission]:
        rendered = self.renderer.render_all(trials, attempt=attempt, resume=resume)
        return [self.build(t, docs, attempt) for t, docs in zip(trials, rendered)]

    def form(self, wanted: str | None) -> str:
        """The form to show: the one asked for, or the backend's own."""
        if wanted is None:
            return self.formats[0]
        if wanted not in self.formats:
            raise UsageError(
                f"--format {wanted}: backend {self.study.backend} submits no {wanted}; use {' or '.join(self.formats)}"
            )
        return wanted


def preview(study: Study) -> Preview:
    """The preview of a study's backend."""
    renderer = Renderer(study, rendezvous=rendezvous_for(study))
    return {"slurm": slurm, "yarn": yarn}.get(study.backend, kubernetes)(study, renderer)


def kubernetes(study: Study, renderer: Renderer) -> Preview:
    """The manifests of the attempt (its Job, and the PodGroup of a batch workload)."""
    return Preview(
        study, renderer, ("yaml", "json"), lambda trial, docs, attempt: Submission(attempt_name(trial, attempt), docs)
    )


def blocks(study: Study, renderer: Renderer, trials: list[Trial]) -> list[Submission]:
    """A merged study's first attempts as `submit` sends them on Kubernetes: blocks, each
    the ConfigMap of its trials' scripts and its Indexed Job (backends/kubernetes/blocks/blocks.py),
    with the `parallelism` the adaptive target starts at (the loop keeps it to the target)."""
    from stratctl.backends.kubernetes.blocks.blockmanifests import block_manifests, part_of

    out: list[Submission] = []
    rendered = renderer.render_all(trials, attempt=0)
    parts = [part_of(t, docs) for t, docs in zip(trials, rendered)]
    start = 0
    while start < len(trials):
        size = min(len(trials) - start, study.throttle.parallelism.initial)
        docs, listed = block_manifests(study, len(out), rendered[start], parts[start:], max(1, size))
        out.append(Submission(docs[1]["metadata"]["name"], docs))
        start += len(listed)
    return out


def slurm(study: Study, renderer: Renderer) -> Preview:
    """The sbatch script of the attempt (sent on sbatch's standard input)."""
    from stratctl.backends.slurm.script import build

    templates = [renderer.dir, bundled_templates()]

    def one(trial: Trial, docs: list[dict[str, Any]], attempt: int) -> Submission:
        script = build(study, docs, templates)
        return Submission(
            script.job,
            {
                "job": script.job,
                "trial": script.trial,
                "attempt": script.attempt,
                "comment": script.comment,
                "tasks": script.tasks,
                "gpus": script.gpus,
                "script": script.text,
            },
            script.text,
        )

    return Preview(study, renderer, ("script", "yaml", "json"), one)


def yarn(study: Study, renderer: Renderer) -> Preview:
    """The application submission request of the attempt (the body of POST
    /ws/v1/cluster/apps), its application id a placeholder."""
    from stratctl.backends.yarn.app import Jar, build
    from stratctl.backends.yarn.scheduler import am_jar, missing_jar, output_of

    templates, output = [renderer.dir, bundled_templates()], output_of(study)
    notes = [
        f"{APP_ID}: the ResourceManager gives each application its id when it is submitted; "
        f"what derives from it is {FROM_APP_ID}"
    ]
    path, named = am_jar(study)
    try:
        jar = Jar.of(path)
    except OSError:
        jar = Jar(path.absolute().as_uri(), "<its size>", "<its modification time, ms>")  # type: ignore[arg-type]
        notes.append(
            f"{missing_jar(study, path, named)} (its size and time here are placeholders; submit "
            "refuses the study until the jar is there)"
        )
    classpath = list(study.yarn.classpath) if study.yarn.classpath is not None else [CLASSPATH]
    if study.yarn.classpath is None:
        notes.append(f"{CLASSPATH}: read from the ResourceManager at submit (set yarn.classpath to fix it)")

    def one(trial: Trial, docs: list[dict[str, Any]], attempt: int) -> Submission:
        app = build(study, docs, templates, output)
        body = _placeholders(
            app.body("application_0_1", study, jar, classpath), app.body("application_0_2", study, jar, classpath)
        )
        return Submission(app.name, body)

    return Preview(study, renderer, ("json", "yaml"), one, notes)


def _placeholders(one: Any, other: Any) -> Any:
    """`one` with every value that differs in `other` (built for another application id)
    replaced by a placeholder: the id itself, or what derives from it."""
    if isinstance(one, dict) and isinstance(other, dict):
        return {k: APP_ID if k == "application-id" else _placeholders(v, other.get(k)) for k, v in one.items()}
    if isinstance(one, list) and isinstance(other, list) and len(one) == len(other):
        return [_placeholders(a, b) for a, b in zip(one, other)]
    return one if one == other else FROM_APP_ID


def suffix(form: str) -> str:
    """The file suffix of a submission shown in `form`."""
    return {"script": ".sh", "yaml": ".yaml", "json": ".json"}[form]
