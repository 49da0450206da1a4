"""`submit --in-cluster`: the study checked and rendered here, as `submit` does, then handed to
a driver in the cluster that runs the same loop there: on Kubernetes a Job of one pod
(backends/kubernetes/verbs/incluster.py), on Slurm a small batch job
(backends/slurm/driver.py). YARN refuses it by name when the study loads
(core/capabilities.py).

Nothing is sent when the study is wrong: it is loaded, expanded and every trial rendered
first, so a bad template fails here, with its file and line, not in a pod or a job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from stratctl.backends.kubernetes.api.connect import Connection, one_shot
from stratctl.backends.kubernetes.rendering.driverjob import DriverSpec
from stratctl.backends.kubernetes.verbs.incluster import send, study_files
from stratctl.backends.launch import Prepared, prepare
from stratctl.errors import UsageError
from stratctl.run.options import SubmitOptions
from stratctl.version import VERSION

DEFAULT_IMAGE = f"stratctl:{VERSION}"  # what the Containerfile's build is tagged


@dataclass(frozen=True)
class DriverOptions:
    """Where and as what the driver runs (`--driver-*`: Kubernetes')."""

    image: str = DEFAULT_IMAGE
    node_selector: Mapping[str, str] = field(default_factory=dict)
    scheduler: str | None = None


class Driven(Protocol):
    """Where a study's driver runs, once it drives the study."""

    def line(self, study: str) -> str: ...  # one line saying so

    def as_dict(self) -> dict[str, Any]: ...  # the same for `-o json`

    def version_warning(self) -> str | None: ...


def hand_over(
    path: str | Path,
    connection: Connection,
    options: SubmitOptions,
    flags: Sequence[str],
    driver: DriverOptions,
    follow: bool = False,
) -> tuple[str, Driven]:
    """Send the study at `path` to a driver in its cluster; (the study's name, where its
    driver runs) once the driver holds it. `follow`: the caller follows the driver
    afterwards (Kubernetes only: refused on Slurm before anything is sent)."""
    prepared = prepare(path, connection.namespace, replace(options, in_cluster=True))
    study = prepared.study
    if study.backend == "slurm":
        if follow:
            raise UsageError(
                f"--follow follows a Kubernetes driver; on Slurm `stratctl status {study.name}` and "
                f"`stratctl wait {study.name}` follow the study"
            )
        return study.name, _to_slurm(prepared, options, flags, driver)
    place, files = study_files(study)
    spec = DriverSpec(
        study=study.name,
        namespace=study.namespace,
        image=driver.image,
        files=files,
        study_file=place,
        flags=tuple(flags),
        client_version=VERSION,
        node_selector=dict(driver.node_selector),
        scheduler=driver.scheduler,
    )
    cluster = one_shot(replace(connection, namespace=study.namespace))
    try:
        return study.name, send(cluster, spec)
    finally:
        cluster.close()


def _to_slurm(prepared: Prepared, options: SubmitOptions, flags: Sequence[str], driver: DriverOptions) -> Driven:
    """The study's loop as a Slurm job, known by name here at once (backends/batch/catalog.py)."""
    from stratctl.backends import scheduler_for
    from stratctl.backends.batch import catalog
    from stratctl.backends.slurm import driver as slurmdriver
    from stratctl.backends.slurm.scheduler import SlurmScheduler

    study = prepared.study
    given = [
        name
        for name, on in (
            ("--driver-image", driver.image != DEFAULT_IMAGE),
            ("--driver-node-selector", bool(driver.node_selector)),
            ("--driver-scheduler", bool(driver.scheduler)),
        )
        if on
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)} (or its STRATCTL_DRIVER_* variable): a Kubernetes driver's; on Slurm the driver "
            "is a job in the study's slurm.partition, account and qos"
        )
    scheduler = scheduler_for(study, prepared.renderer)
    assert isinstance(scheduler, SlurmScheduler)
    file = str(Path(study.source).resolve()) if study.source else None
    catalog.keep(catalog.Entry(study.name, study.backend, str(scheduler.output), file, scheduler.where), study.text)
    return slurmdriver.send(scheduler.slurm, study, flags, options.timeout)
