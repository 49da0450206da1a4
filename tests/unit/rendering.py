"""The Renderer, `validate` and `make_plan` as the commands build them: handed the rendezvous
step of the study's backend (stratctl.backends.rendezvous_for), so a Kubernetes study's
manifests carry the contract as `submit` and `render` send them, and a Slurm or YARN study's
do not."""

from __future__ import annotations

from pathlib import Path

from stratctl.backends import rendezvous_for
from stratctl.core import plan, render
from stratctl.core.space import Trial
from stratctl.core.spec import Study


class Renderer(render.Renderer):
    def __init__(self, study: Study, templates_dir: Path | None = None) -> None:
        super().__init__(study, templates_dir, rendezvous=rendezvous_for(study))


def validate(path: str | Path) -> tuple[Study, list[Trial]]:
    return render.validate(path, rendezvous_for)


def make_plan(path: str | Path) -> plan.Plan:
    return plan.make_plan(path, rendezvous_for)
