"""Where a study's trials run: one package per backend (kubernetes/, slurm/, yarn/), what the
batch schedulers share (batch/: the `Scheduler` protocol and the loop over it), and the one
place a study's backend is chosen (`scheduler_for`, `rendezvous_for`): the CLI asks here, the
shared loop (stratctl/run/) and the study core's Renderer (stratctl/core/) are handed what it
returns and never import a backend themselves.

Importing this package imports nothing else: every module of every backend is imported
through it, and a command's start-up (`stratctl status` on Kubernetes) must not pay for the
study model it does not load (core/spec.py, its distributions: about 0.3 s)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratctl.backends.batch.catalog import Entry
    from stratctl.backends.batch.scheduler import Scheduler
    from stratctl.core.contract import Rendezvous
    from stratctl.core.render import Renderer
    from stratctl.core.spec import Study
    from stratctl.errors import UsageError


def scheduler_for(
    study: Study,
    renderer: Renderer | None = None,
    workdir: str | None = None,
    rendered: dict[str, list[dict[str, Any]]] | None = None,
) -> Scheduler:
    """The scheduler of a study whose backend runs an attempt as one job (`rendered`: first
    attempts already rendered by `renderer`, by trial name, for a scheduler that takes them
    instead of rendering them again)."""
    if study.backend == "slurm":
        from stratctl.backends.slurm.scheduler import SlurmScheduler

        return SlurmScheduler(study, renderer, workdir=workdir, rendered=rendered)
    if study.backend == "yarn":
        from stratctl.backends.yarn.scheduler import YarnScheduler

        return YarnScheduler(study, renderer, workdir=workdir)
    from stratctl.errors import UsageError

    raise UsageError(f"{study.name}: backend {study.backend} has no attempt scheduler")


def rendezvous_for(study: Study) -> Rendezvous | None:
    """The step the Renderer stamps the rendezvous contract with on a study's manifests:
    Kubernetes' (its pods find each other by the names its objects give them); None on Slurm
    and YARN, whose script and application master give their processes the contract where
    they run."""
    if study.backend == "kubernetes":
        from stratctl.backends.kubernetes.rendering.rendezvous import RENDEZVOUS

        return RENDEZVOUS
    return None


def named_study(
    argument: str | None, backend: str | None = None, rm: str | None = None
) -> tuple[Study, Scheduler] | None:
    """The study a command's STUDY argument means on a batch scheduler, with its scheduler;
    None for a Kubernetes study (named by its record in the cluster). The one place it is
    decided for every command:

    - a study FILE names its backend itself (`--backend`, if given, must agree);
    - a NAME is looked up in the catalog of studies submitted to Slurm and YARN
      (backends/batch/catalog.py), on the backend `--backend` names, or the one that knows it; on
      Slurm, a study the catalog does not know is found by the study directory its jobs
      still show (squeue); a name no batch scheduler knows is a Kubernetes study's;
    - `rm`: the YARN ResourceManager to ask instead of the study's `yarn.resource_managers`.
    """
    import os

    from stratctl.backends.batch import catalog
    from stratctl.errors import UsageError

    if backend is not None and backend not in catalog.BACKENDS:
        raise UsageError(f"--backend {backend}: expected one of {', '.join(catalog.BACKENDS)}")
    if rm is not None and backend not in (None, "yarn"):
        raise UsageError(f"--rm names a YARN ResourceManager: it goes with --backend yarn, not --backend {backend}")
    if not argument:
        return None
    if os.path.isfile(argument):
        return _from_file(argument, backend, rm)
    if rm is not None:
        backend = "yarn"
    entry = catalog.choose(argument, catalog.entries(argument), backend)
    if entry is None and backend == "slurm":
        entry = _slurm_directory(argument)
    if entry is None:
        if backend in catalog.ATTEMPT_BACKENDS:
            raise _not_found(argument, backend, rm)
        return None
    study = _with_rm(catalog.study_of(entry), rm)
    scheduler = scheduler_for(study)
    scheduler.output = Path(entry.directory)  # type: ignore[attr-defined]  # where it was submitted to
    return study, scheduler


def _from_file(path: str, backend: str | None, rm: str | None) -> tuple[Study, Scheduler] | None:
    from stratctl.core.spec import load_study
    from stratctl.errors import UsageError

    study = load_study(path)
    if backend is not None and backend != study.backend:
        raise UsageError(f"{path} is a study on {study.backend}, not {backend}: leave --backend out for a study file")
    if study.backend == "kubernetes":
        raise UsageError(f"{path} is a Kubernetes study: give its name ({study.name}) instead of its file")
    study = _with_rm(study, rm)
    return study, scheduler_for(study)


def _with_rm(study: Study, rm: str | None) -> Study:
    """The study asking `rm` instead of its own ResourceManagers (a YARN study)."""
    if rm is None:
        return study
    from stratctl.errors import UsageError

    if study.backend != "yarn":
        raise UsageError(f"--rm names a YARN ResourceManager: study {study.name} runs on {study.backend}")
    changed = study.model_copy(update={"yarn": study.yarn.model_copy(update={"resource_managers": [rm.rstrip("/")]})})
    changed._source, changed._doc = study._source, study._doc
    return changed


def _slurm_directory(name: str) -> Entry | None:
    """A Slurm study's catalog entry from the study directory its jobs show (each job's log
    file is in it), while the controller lists one of them: None otherwise."""
    from stratctl.backends.batch import catalog
    from stratctl.backends.slurm.commands import Slurm
    from stratctl.backends.slurm.script import parse_comment

    for job in Slurm().jobs():
        named = parse_comment(job.get("comment"))
        log = str(job.get("standard_output") or "")
        if named is None or named[0] != name or not log.startswith("/"):
            continue
        found = catalog.in_directory(Path(log).parent.parent)
        if found is not None and found.name == name:
            return found
    return None


def _not_found(name: str, backend: str, rm: str | None) -> UsageError:
    """Why a name is no study on a batch scheduler, in one line."""
    from stratctl.backends.batch import catalog

    error = catalog.unknown(name, backend)
    if backend == "yarn" and rm is not None:
        from stratctl.backends.yarn.app import study_tag
        from stratctl.backends.yarn.rest import ResourceManager

        apps = ResourceManager([rm.rstrip("/")]).apps(study_tag(name))
        if apps:
            error.args = (
                f"the ResourceManager at {rm} has {len(apps)} application(s) of study {name}, but its study "
                f"directory is not known here (none submitted from this account): give the study's file",
            )
    if backend == "slurm":
        error.args = (f"{error.args[0]}; nor does the Slurm controller list a job of it",)
    return error
