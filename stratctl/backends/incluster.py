"""`submit --in-cluster`: the study checked and rendered here, as `submit` does, then handed to
a driver in the cluster (backends/kubernetes/verbs/incluster.py) that runs the same loop there.

Nothing is sent when the study is wrong: it is loaded, expanded and every trial rendered
first, so a bad template fails here, with its file and line, not in a pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from stratctl.backends.kubernetes.api.connect import Connection, one_shot
from stratctl.backends.kubernetes.rendering.driverjob import DriverSpec
from stratctl.backends.kubernetes.verbs.incluster import Driven, send, study_files
from stratctl.backends.launch import prepare
from stratctl.errors import Unsupported
from stratctl.run.options import SubmitOptions
from stratctl.version import VERSION

DEFAULT_IMAGE = f"stratctl:{VERSION}"  # what the Containerfile's build is tagged


@dataclass(frozen=True)
class DriverOptions:
    """Where and as what the driver runs (`--driver-*`)."""

    image: str = DEFAULT_IMAGE
    node_selector: Mapping[str, str] = field(default_factory=dict)
    scheduler: str | None = None


def hand_over(
    path: str | Path,
    connection: Connection,
    options: SubmitOptions,
    flags: Sequence[str],
    driver: DriverOptions,
) -> tuple[str, Driven]:
    """Send the study at `path` to a driver in its namespace; (the study's name, where its
    driver runs) once the driver holds it."""
    prepared = prepare(path, connection.namespace, options)
    study = prepared.study
    if study.backend != "kubernetes":
        raise Unsupported(
            f"--in-cluster runs the study's loop as a Kubernetes Job; study {study.name} runs on {study.backend}"
        )
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
