"""Drain and resume: hand a study's GPUs back to production without losing its work.

`drain` marks the study record drained, so every submit loop (on any machine: they
re-read the record each cycle) holds new trials, then suspends the study's running and
pending attempts by deleting their jobs: pods get SIGTERM and their grace period to
write a checkpoint. Each suspended trial is marked in the record with the attempt that
was deleted and its accounting. `resume` creates each marked trial's next attempt with
STRATCTL_RESUME=1 and clears the flag. Critical studies are never drained. A submit
loop whose study says `throttle.on_breaker: drain` suspends through `suspend` too, under a
flag of its own (`backends/kubernetes/loop/shedding.py`).

Delete-and-requeue rather than Volcano's AbortJob/ResumeJob Commands: see docs/checkpoints.md,
"Drain: delete-and-requeue, not AbortJob/ResumeJob".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP, Cluster
from stratctl.backends.kubernetes.attempts.requeue import (
    carried_of_mark,
    carry_forward,
    mark_of,
    pod_starts,
    submit_attempt,
)
from stratctl.backends.kubernetes.blocks.blocks import LIVE_PODS, blocks_of, index_of
from stratctl.backends.kubernetes.objects.record import (
    BREAKER_KEY,
    job_kinds,
    loop_following,
    parse_record,
    record_name,
    records,
    suspended_of,
    suspended_patch,
)
from stratctl.backends.kubernetes.objects.state import classify, latest_attempts
from stratctl.core import document
from stratctl.errors import ClusterError, SpecConflict, StratctlError, Unreachable, UsageError
from stratctl.run.closedloop import marked_trials
from stratctl.run.rows import Outcome

if TYPE_CHECKING:
    from stratctl.core.render import Renderer
    from stratctl.core.space import Trial
    from stratctl.core.spec import Study

BREAKER = "breaker"  # who suspended a trial, in its mark, when the etcd breaker did


def suspend(
    cluster: Cluster, namespace: str, name: str, kinds: Iterable[tuple[str, str]], now: float, by: str = ""
) -> list[str]:
    """Mark then delete every running or pending attempt of the study; the trials marked
    (`by`: who suspended them, when not a user's `drain`, kept in each mark)."""
    jobs, kind_of = [], {}
    for kind in kinds:
        for job in cluster.list(kind, namespace, label_selector=f"{labels.STUDY}={name}")[0]:
            jobs.append(job)
            kind_of[job["metadata"]["name"]] = kind  # list items of built-in kinds carry no apiVersion
    cm = cluster.get(CONFIGMAP, record_name(name), namespace)
    marks = suspended_of(cm)
    victims = {}
    starts: dict[str, float] | None = None
    for trial, job in latest_attempts(jobs).items():
        attempt = int(job["metadata"]["labels"].get(labels.ATTEMPT, "0"))
        if not classify(job).in_flight or (trial in marks and marks[trial]["attempt"] >= attempt):
            continue
        if starts is None:  # a batch/v1 Job does not record when its gang started: its pods do
            starts = (pod_starts(cluster, namespace, name, BATCH_JOB) if BATCH_JOB in kinds else None) or {}
        carry = carry_forward(job, now, suspended=True, started=starts.get(job["metadata"].get("uid")))
        victims[trial] = job
        marks[trial] = mark_of(job, carry, by=by)
    held = [] if by else suspend_blocks(cluster, namespace, jobs)
    if not victims:
        return held
    # The marks go in before the jobs go: a loop that sees a job gone must see its mark.
    cluster.patch(CONFIGMAP, record_name(name), suspended_patch(marks), namespace)
    for job in victims.values():
        kind = kind_of[job["metadata"]["name"]]
        cluster.delete(kind, job["metadata"]["name"], namespace)
        if kind == BATCH_JOB:
            cluster.delete(PODGROUP, job["metadata"]["name"], namespace)
    return sorted(set(victims) | set(held))


def suspend_blocks(cluster: Cluster, namespace: str, jobs: list[dict[str, Any]]) -> list[str]:
    """Suspend the study's unfinished blocks (merged submissions: `spec.suspend`, so the job
    controller ends their pods, with their grace period, and starts none until resumed); the
    trials that were running or pending in them. A block's trials carry no marks: the block
    keeps them, and `resume` lifts its suspension (each index runs again from its checkpoint)."""
    trials: list[str] = []
    for block in blocks_of(jobs, []):
        if block.suspended or not block.unfinished():
            continue
        pods, _ = cluster.list(POD, namespace, label_selector=f"{labels.BLOCK}={block.name}", field_selector=LIVE_PODS)
        block.pods = {i: p for p in pods if (i := index_of(p)) is not None}
        cluster.patch(BATCH_JOB, block.name, {"spec": {"suspend": True}}, namespace)
        trials += [block.listed[i].name for i in block.live()]
    return trials


def resume_blocks(cluster: Cluster, namespace: str, study: str) -> list[str]:
    """Lift the suspension of the study's suspended blocks; the trials they still hold."""
    jobs, _ = cluster.list(BATCH_JOB, namespace, label_selector=f"{labels.STUDY}={study},{labels.BLOCK}")
    trials: list[str] = []
    for block in blocks_of(jobs, []):
        if block.suspended:
            cluster.patch(BATCH_JOB, block.name, {"spec": {"suspend": False}}, namespace)
            done = block.completed | block.failed
            trials += [t.name for i, t in enumerate(block.listed) if i not in done]
    return trials


def drain(
    cluster: Cluster,
    namespace: str,
    study: str | None = None,
    all_noncritical: bool = False,
    settle: float = 3.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> list[Outcome]:
    """Drain one study, or every non-critical study of the namespace.

    After `settle` seconds a second pass suspends what a submit loop created in the
    meantime (it read the record just before it was drained) and re-asserts the flag.
    """
    if bool(study) == bool(all_noncritical):
        raise UsageError("name a study, or pass --all-noncritical")
    outcomes = []
    for cm in records(cluster, namespace, study):
        record = parse_record(cm)
        outcome = Outcome(record.study, critical=record.critical)
        outcomes.append(outcome)
        if record.critical:
            if study:
                raise UsageError(f"study {record.study} is critical: drain leaves critical studies running")
            outcome.skipped = "critical"
            continue
        cluster.patch(CONFIGMAP, record_name(record.study), {"data": {"drained": "true"}}, namespace)
        outcome.suspended = suspend(cluster, namespace, record.study, job_kinds(record.source), clock())
    if settle and any(not o.skipped for o in outcomes):
        sleep(settle)
        for outcome in outcomes:
            if outcome.skipped:
                continue
            cluster.patch(CONFIGMAP, record_name(outcome.study), {"data": {"drained": "true"}}, namespace)
            cm = cluster.get(CONFIGMAP, record_name(outcome.study), namespace)
            late = suspend(cluster, namespace, outcome.study, job_kinds(parse_record(cm).source), clock())
            outcome.suspended = sorted(set(outcome.suspended) | set(late))
    return outcomes


def _study_from_record(cm: dict[str, Any], namespace: str) -> tuple[Study, dict[str, Trial], Renderer]:
    """The study, its trials by name and a renderer, rebuilt from the text in its record
    (a closed-loop search's suspended trials from their marks: it expands to no list)."""
    from stratctl.backends.kubernetes.rendering.rendezvous import RENDEZVOUS
    from stratctl.core.render import Renderer
    from stratctl.core.space import expand
    from stratctl.core.spec import Study, study_from_document

    record = parse_record(cm)
    study = study_from_document(document.parse(record.source, f"<record {record_name(record.study)}>"))
    if study.namespace != namespace:
        study = Study.model_validate({**study.model_dump(), "namespace": namespace})
    if study.strategy.closed_loop:
        return study, marked_trials(suspended_of(cm)), Renderer(study, rendezvous=RENDEZVOUS)
    return study, {t.name: t for t in expand(study)}, Renderer(study, rendezvous=RENDEZVOUS)


def resume(cluster: Cluster, namespace: str, study: str, clock: Callable[[], float] = time.time) -> Outcome:
    """Bring a drained study's suspended trials back from their checkpoints; undrain it.

    Trials the etcd breaker suspended stay suspended while the breaker holds the study and
    its submit loop follows it: that loop resumes them when the breaker clears (a user's
    resume does not lift a breaker drain). A breaker flag whose loop is gone is lifted here,
    since nothing else would lift it."""
    [cm] = records(cluster, namespace, study)
    record = parse_record(cm)
    outcome = Outcome(record.study, critical=record.critical)
    marks = suspended_of(cm)
    breaker = bool(record.breaker) and loop_following(cm, clock()) is not None
    kept = {t: m for t, m in marks.items() if m.get("by") == BREAKER} if breaker else {}
    if kept:
        outcome.note = (
            f"{len(kept)} trial(s) drained by the etcd breaker stay suspended until it clears "
            "(the submit loop resumes them)"
        )
    marks = {t: m for t, m in marks.items() if t not in kept}
    remaining = dict(marks)
    if marks:
        try:
            spec, trials, renderer = _study_from_record(cm, namespace)
        except StratctlError as exc:
            spec = None
            outcome.note = f"cannot render the study from its record ({exc}); a running submit loop resumes them"
        if spec is not None:
            for trial, mark in sorted(marks.items()):
                if trial not in trials:
                    continue
                try:
                    submit_attempt(
                        cluster, renderer, trials[trial], mark["attempt"] + 1, carried_of_mark(mark), namespace
                    )
                except Unreachable:
                    raise  # the server is gone: stop, do not walk the other marks at a timeout each
                except (ClusterError, SpecConflict) as exc:
                    outcome.note = f"trial {trial}: {exc}"
                    continue
                outcome.resumed.append(trial)
                del remaining[trial]
    if not breaker:  # blocks suspended by `drain` (never by the breaker) run again
        outcome.resumed += resume_blocks(cluster, namespace, record.study)
    # New attempts first, then the flag: a loop that sees the study undrained sees them.
    patch = suspended_patch({**remaining, **kept})
    patch["data"]["drained"] = "false"
    if not breaker:
        patch["data"][BREAKER_KEY] = ""
    cluster.patch(CONFIGMAP, record_name(record.study), patch, namespace)
    outcome.left = sorted({**remaining, **kept})
    return outcome
