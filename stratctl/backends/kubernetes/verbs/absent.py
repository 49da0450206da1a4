"""Why a trial has no pods to read: it is not one of the study's trials (did you mean ...),
it was not created yet, it is suspended, it ended and was cleaned up, or its job has none
yet. Asked only once `logs` found no pod, so a trial that has some costs nothing more.

`why` is pure (what the study record and the trial's jobs say in, the sentence out);
`no_pods` reads them.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import TYPE_CHECKING

from stratctl import labels
from stratctl.backends.kubernetes.objects import roster
from stratctl.backends.kubernetes.objects.record import StudyRecord, job_kinds, parse_record, records, suspended_of
from stratctl.errors import UsageError

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster

NEAR = 0.8  # difflib's ratio for a trial name taken for a slip (a character or two of its hash)


def why(
    study: str,
    trial: str,
    namespace: str,
    record: StudyRecord,
    marks: Collection[str],
    jobs: list[str],
    names: list[str],
) -> str:
    """The sentence saying why `trial` has no pods: `marks` the study's suspended trials,
    `jobs` the names of the trial's jobs, `names` every trial of the study."""
    if jobs:
        return (
            f"trial {trial} of study {study} has no pods in namespace {namespace} yet: its job "
            f"{max(jobs)} has not started any (or they were cleaned up)"
        )
    if trial in marks:
        return f"trial {trial} of study {study} is suspended (drained): it has no pods until `stratctl resume {study}`"
    ended = record.finished.get(trial) or (record.told.get(trial) or {}).get("state")
    if ended:
        return f"trial {trial} of study {study} {ended} and was cleaned up: its pods are gone"
    if trial in names:
        return f"trial {trial} of study {study} has not been created yet: it has no pods"
    near = difflib.get_close_matches(trial, names, n=1, cutoff=NEAR)
    return (
        f"study {study} has no trial {trial!r}"
        + (f" (did you mean {near[0]}?)" if near else "")
        + f"; `stratctl status {study} -o name` lists its {len(names)} trials"
    )


def no_pods(cluster: Cluster, namespace: str, study: str, trial: str) -> UsageError:
    """The error for a trial of which `logs` found no pod (a study not in the namespace is
    said as `status` says it)."""
    [cm] = records(cluster, namespace, study)
    record = parse_record(cm)
    kinds = job_kinds(record.source)
    selector = f"{labels.STUDY}={study},{labels.TRIAL}={trial}"
    jobs = [j["metadata"]["name"] for kind in kinds for j in cluster.list(kind, namespace, label_selector=selector)[0]]
    marks = suspended_of(cm)
    names: set[str] = set()
    if not jobs and trial not in marks and trial not in record.finished and trial not in record.told:
        trials = roster.expected(record)
        if trials is not None:
            names = {t.name for t in trials}
        else:  # a closed-loop search: the trials it asked are those with jobs, or known to the record
            for kind in kinds:
                items = cluster.list(kind, namespace, label_selector=f"{labels.STUDY}={study}")[0]
                names |= {n for j in items if (n := (j["metadata"].get("labels") or {}).get(labels.TRIAL))}
    names |= set(marks) | set(record.finished) | set(record.told)
    return UsageError(why(study, trial, namespace, record, marks, jobs, sorted(names)))
