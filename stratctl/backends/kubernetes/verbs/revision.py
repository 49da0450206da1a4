"""Revision: a study submitted again after an edit, checked against what the cluster holds.

Before the submit loop starts, every trial the cluster holds (its latest job, or its
outcome in the study record once the job was cleaned up) is compared with what the study
renders now (`study.changes.compare`). An edit that changes trials already submitted is
refused (`StudyChanged`, exit 4) with what changed and the ways forward, before anything
is written. With `--rerun-changed` each changed trial gets its next attempt rendered from
the new spec (annotated `stratctl.io/requeued-because: study changed ...`, not resuming
the old spec's checkpoint), created before the old attempt is deleted if it still runs;
a rerun after a crash between the two deletes what is left, so no trial ever runs twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, PODGROUP, Cluster
from stratctl.backends.kubernetes.attempts.requeue import carry_forward, create_attempt
from stratctl.backends.kubernetes.blocks.blocks import expand as block_views
from stratctl.backends.kubernetes.blocks.blockstop import block_of_view, stop_index
from stratctl.backends.kubernetes.objects.record import parse_record, record_name
from stratctl.backends.kubernetes.objects.state import attempt_of, classify, latest_attempts, spec_hash_of, trial_of
from stratctl.backends.kubernetes.rendering.rendezvous import RENDEZVOUS
from stratctl.core.changes import Comparison, compare, fields_text, refusal, summary
from stratctl.core.render import Renderer
from stratctl.core.space import Trial, expand
from stratctl.core.spec import Study
from stratctl.errors import NotFound, StratctlError, StudyChanged, UsageError

if TYPE_CHECKING:
    from stratctl.run.progress import Reporter

BECAUSE = "study changed"  # how the requeued-because annotation of a rerun attempt starts


def revise(
    cluster: Cluster,
    study: Study,
    trials: list[Trial],
    renderer: Renderer,
    manifests: dict[str, list[dict[str, Any]]],
    kind: tuple[str, str],
    rerun: bool,
    reporter: Reporter,
    file: str = "FILE",
    clock: Callable[[], float] = time.time,
) -> Comparison | None:
    """Compare the study with what the cluster holds of it; refuse a change, or rerun it.

    None when the study was never submitted (no record)."""
    ns = study.namespace
    try:
        record = parse_record(cluster.get(CONFIGMAP, record_name(study.name), ns))
    except NotFound:
        return None
    jobs, _ = cluster.list(kind, ns, label_selector=f"{labels.STUDY}={study.name}")
    jobs = block_views(jobs, [])[0]  # a block (merged submissions) read as its trials, each with its own spec hash
    latest = latest_attempts(jobs)
    _finish_replacements(cluster, jobs, latest, kind, ns, reporter)
    by_name = {t.name: t for t in trials}
    existing: dict[str, str | None] = {name: spec_hash_of(job) for name, job in latest.items()}
    for name in record.finished:
        existing.setdefault(name, None)
    rendered = {t.name: "" for t in trials}  # trials not in the cluster need no hash
    for name in existing:
        if name in by_name:
            rendered[name] = _hash_now(renderer, by_name[name], latest.get(name), manifests)
    old = _old_study(_loads(record.spec), study)
    if old is not None:
        _judge_cleaned_up(old, existing, rendered)
    comparison = compare(
        old.model_dump(mode="json") if old else None,
        study.model_dump(mode="json"),
        existing,
        rendered,
        spec_changed=record.spec_hash != study.spec_hash,
    )
    if not comparison.refused:
        if record.spec_hash != study.spec_hash and comparison.existing:
            reporter.event(summary(study.name, comparison))
        return comparison
    if not rerun:
        raise StudyChanged(refusal(study.name, comparison, file))
    if record.drained:
        raise UsageError(
            f"study {study.name} is drained: `stratctl resume {study.name}` first, then rerun with --rerun-changed"
        )
    reporter.event(summary(study.name, comparison) + "; --rerun-changed: rerunning them")
    _rerun(cluster, study.name, comparison, by_name, latest, record.finished, renderer, kind, ns, reporter, clock)
    return comparison


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _resume_of(node: Any) -> bool:
    """Whether a job's containers were told to resume (STRATCTL_RESUME=1): part of what its
    spec hash covers, so the study's hash for that attempt is rendered the same way."""
    if isinstance(node, dict):
        if node.get("name") == labels.ENV_RESUME and "value" in node:
            return bool(node.get("value") == "1")
        return any(_resume_of(v) for v in node.values())
    if isinstance(node, list):
        return any(_resume_of(v) for v in node)
    return False


def _hash_now(
    renderer: Renderer, trial: Trial, job: dict[str, Any] | None, manifests: dict[str, list[dict[str, Any]]]
) -> str:
    """The spec hash the study renders now for the attempt the cluster holds of `trial`."""
    attempt = attempt_of(job) if job is not None else 0
    resume = _resume_of(job.get("spec")) if job is not None else False
    docs = manifests.get(trial.name) if (attempt, resume) == (0, False) else None
    docs = docs or renderer.render(trial, attempt=attempt, resume=resume)
    spec_hash: str = docs[0]["metadata"]["labels"][labels.SPEC_HASH]
    return spec_hash


def _old_study(spec: dict[str, Any] | None, study: Study) -> Study | None:
    """The study as last submitted, from the spec its record kept (the fields the file set,
    so it renders as it did); None when there is none or it is no longer a valid study."""
    if spec is None:
        return None
    try:
        old = Study.model_validate(spec)
    except ValueError:
        return None
    old._source = study.source  # templates resolve from the same place
    return old


def _judge_cleaned_up(old: Study, existing: dict[str, str | None], rendered: dict[str, str]) -> None:
    """Finished trials whose jobs were cleaned up carry no hash: render them as the study
    was last submitted and as it is now, and compare those (left unknown when the old
    study cannot be rendered any more)."""
    unknown = [n for n, h in existing.items() if h is None and n in rendered]
    if not unknown:
        return
    try:
        old_renderer = Renderer(old, rendezvous=RENDEZVOUS)
        old_trials = {t.name: t for t in expand(old)}
        for name in unknown:
            if name in old_trials:
                existing[name] = old_renderer.render(old_trials[name])[0]["metadata"]["labels"][labels.SPEC_HASH]
    except (StratctlError, ValueError):
        return


def _delete(cluster: Cluster, kind: tuple[str, str], job: dict[str, Any], ns: str) -> None:
    """End an attempt that runs the old spec: its job deleted; a trial of a block, its index
    stopped (blockstop.py)."""
    if block_of_view(job) is not None:
        stop_index(cluster, ns, job)
        return
    name = job["metadata"]["name"]
    cluster.delete(kind, name, ns)
    if kind == BATCH_JOB:
        cluster.delete(PODGROUP, name, ns)


def _rerun(
    cluster: Cluster,
    study: str,
    c: Comparison,
    by_name: dict[str, Trial],
    latest: dict[str, dict[str, Any]],
    finished: dict[str, str],
    renderer: Renderer,
    kind: tuple[str, str],
    ns: str,
    reporter: Reporter,
    clock: Callable[[], float],
) -> None:
    because = f"{BECAUSE} ({fields_text(c.fields)})"
    unfinished = []
    for name in c.changed:
        job = latest.get(name)
        if job is None:  # cleaned up: it runs again as a new trial once its outcome is forgotten
            unfinished.append(name)
            continue
        attempt = attempt_of(job) + 1
        docs = renderer.render(by_name[name], attempt=attempt, resume=False)
        notes = {**carry_forward(job, clock()).annotations(), labels.REQUEUED_BECAUSE: because}
        for doc in docs:
            meta = doc.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
        create_attempt(cluster, docs, ns)
        old = job["metadata"]["name"]
        if classify(job).in_flight:
            _delete(cluster, kind, job, ns)
            reporter.event(f"trial {name}: attempt {attempt} runs the new spec; {old} deleted")
        else:
            reporter.event(f"trial {name}: attempt {attempt} runs the new spec")
    for name in c.removed:
        job = latest.get(name)
        if job is not None and classify(job).in_flight:
            _delete(cluster, kind, job, ns)
            reporter.event(f"trial {name}: no longer in the study; {job['metadata']['name']} deleted")
    if unfinished:
        kept = {k: v for k, v in finished.items() if k not in unfinished}
        cluster.patch(CONFIGMAP, record_name(study), {"data": {"finished": json.dumps(kept, sort_keys=True)}}, ns)
        reporter.event(f"{len(unfinished)} finished trial(s) whose jobs were cleaned up run again")


def _finish_replacements(
    cluster: Cluster,
    jobs: list[dict[str, Any]],
    latest: dict[str, dict[str, Any]],
    kind: tuple[str, str],
    ns: str,
    reporter: Reporter,
) -> None:
    """A rerun attempt exists but the attempt it replaces still runs (the last submit stopped
    between the two): delete it now."""
    for job in jobs:
        trial = trial_of(job)
        newest = latest.get(trial or "")
        if newest is None or newest is job or attempt_of(job) >= attempt_of(newest):
            continue
        why = ((newest.get("metadata") or {}).get("annotations") or {}).get(labels.REQUEUED_BECAUSE, "")
        if why.startswith(BECAUSE) and classify(job).in_flight:
            _delete(cluster, kind, job, ns)
            reporter.event(
                f"trial {trial}: {job['metadata']['name']} deleted, replaced by {newest['metadata']['name']} ({why})"
            )
