"""Where a study's trials run: the Backend protocol (base.py), one package per backend, and
the one place a study's backend is chosen (`scheduler_for`): the CLI asks here, the shared
loop (stratctl/run/) is handed what it returns and never imports a backend itself.

Importing this package imports nothing else: every module of every backend is imported
through it, and a command's start-up (`stratctl status` on Kubernetes) must not pay for the
study model it does not load (core/spec.py, its distributions: about 0.3 s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stratctl.backends.base import Scheduler
    from stratctl.core.spec import Study


def scheduler_for(study: Study, renderer=None, workdir: str | None = None) -> Scheduler:
    """The scheduler of a study whose backend runs an attempt as one job."""
    if study.backend == "slurm":
        from stratctl.backends.slurm.scheduler import SlurmScheduler

        return SlurmScheduler(study, renderer, workdir=workdir)
    if study.backend == "yarn":
        from stratctl.backends.yarn.scheduler import YarnScheduler

        return YarnScheduler(study, renderer, workdir=workdir)
    from stratctl.errors import UsageError

    raise UsageError(f"{study.name}: backend {study.backend} has no attempt scheduler")
