"""Status: what every study and trial of a namespace is doing, read from the cluster alone.

Two ways to read it, both built by `summary.build`:

- `collect(..., shown=None)` lists every trial's jobs (Volcano Jobs and batch/v1 Jobs),
  their PodGroups (why a gang is pending) and their pods that reached a node (results;
  when a batch/v1 Job's gang started), page by page with the next page already on its
  way, keeping a small row per object: exact, for JSON/YAML and `--sort`.
- `collect(..., shown=N)` is what the table needs: for a study whose submit loop keeps a
  fresh summary in the study record (trials by state, attempts, GPU-hours; written every
  few seconds, or final), that row plus the first N trials by name, read as the first
  page of the study's jobs. A study without a fresh summary is listed in full. So a
  10,000-trial study costs a few small requests instead of 25 MB of JSON.

A trial's result is the JSON object its container wrote as termination message
(/dev/termination-log); `sort_trials(rows, "-accuracy")` puts the best first.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any

import yaml

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP, Cluster, resource_path
from stratctl.backends.kubernetes.blocks.blocks import expand, is_block
from stratctl.backends.kubernetes.objects import roster
from stratctl.backends.kubernetes.objects.lease import LeaseStore
from stratctl.backends.kubernetes.objects.record import job_kinds, parse_record, record_name, records
from stratctl.backends.kubernetes.objects.state import classify, job_of_pod, run_starts
from stratctl.backends.kubernetes.objects.summary import build, latest_slim, study_row, summary_of
from stratctl.backends.kubernetes.objects.waiting import Queues, explain_pending, pending_reason
from stratctl.errors import ClusterError, NotFound
from stratctl.run.ranking import best_of
from stratctl.run.rows import Snapshot, StudyRow, TrialRow
from stratctl.trialstate import TrialState

PAGE = 500
FRESH = 30.0  # seconds a submit loop's summary is shown as is (the loop writes it every few)
# Pods that reached a node: finished ones hold results, and the start of a batch/v1 Job's
# first pod is when its trial started running (the Job does not record it).
STARTED_PODS = "status.phase!=Pending,status.phase!=Unknown"


# ------------------------------------------------------------------ reading the cluster


def _pages(
    cluster: Cluster,
    kind: tuple[str, str],
    namespace: str,
    label_selector: str,
    field_selector: str | None = None,
    page: int = PAGE,
) -> Iterator[list[dict[str, Any]]]:
    """Each page's items as the server sent them, the next page requested while the caller
    works on this one; at most two pages are held at a time."""
    path = resource_path(*kind, namespace)

    def fetch(token: str | None) -> dict[str, Any]:
        query = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": page, "continue": token}
        answer: dict[str, Any] = cluster.request("GET", path, query, what=f"list {kind[1]}")
        return answer

    with ThreadPoolExecutor(1) as ahead:
        body = fetch(None)
        while True:
            token = (body.get("metadata") or {}).get("continue")
            upcoming = ahead.submit(fetch, token) if token else None
            yield body.get("items") or []
            if upcoming is None:
                return
            body = upcoming.result()


def _result(pod: dict[str, Any]) -> dict[str, Any] | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        message = ((container.get("state") or {}).get("terminated") or {}).get("message")
        if not message:
            continue
        try:
            value = json.loads(message)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _owner_job(pg: dict[str, Any]) -> str | None:
    """The job whose gang the PodGroup is: Volcano's own PodGroups name their Volcano Job as
    owner; the one stratctl creates beside a batch/v1 Job has no owner and its name."""
    owner = next(
        (o.get("name") for o in (pg.get("metadata") or {}).get("ownerReferences") or [] if o.get("kind") == "Job"), None
    )
    return owner or (pg.get("metadata") or {}).get("name")


def _exit(pod: dict[str, Any]) -> tuple[int, str] | None:
    """The exit code and reason of the pod's first container that exited non-zero."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        if isinstance(ended.get("exitCode"), int) and ended["exitCode"] != 0:
            return ended["exitCode"], ended.get("reason") or ""
    return None


def _read_pods(
    cluster: Cluster,
    namespace: str,
    selector: str,
    results: dict[str, dict[str, Any]],
    starts: dict[str, float],
    exits: dict[str, tuple[int, str]] | None = None,
    kept: list[dict[str, Any]] | None = None,
) -> None:
    """Results (job name → the first JSON object a finished container wrote), run starts
    (job uid → the earliest start of its pods) and exits (job name → the exit code and
    reason of a container that failed) from the pods that reached a node. With `kept`,
    every pod of the selector is read (pending ones too) and kept there."""
    exits = {} if exits is None else exits
    for items in _pages(cluster, POD, namespace, selector, None if kept is not None else STARTED_PODS):
        if kept is not None:
            kept.extend(items)
        _take_pods(items, results, starts, exits)


def _take_pods(
    items: list[dict[str, Any]], results: dict[str, Any], starts: dict[str, Any], exits: dict[str, Any]
) -> None:
    """What `_read_pods` reads of these pods."""
    for pod in items:
        job, value, ended = job_of_pod(pod), _result(pod), _exit(pod)
        if job and value is not None and job not in results:
            results[job] = value
        if job and ended is not None and job not in exits:
            exits[job] = ended
    for uid, started in run_starts(items).items():
        starts[uid] = min(started, starts.get(uid, started))


def results_in(pods: Iterable[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The results of these trials (trial name → its given job) that pods already at hand
    hold (a watch's copy of the cluster's pods)."""
    by_job = {job["metadata"]["name"]: trial for trial, job in jobs.items()}
    out: dict[str, dict[str, Any]] = {}
    for pod in pods:
        trial = by_job.get(job_of_pod(pod) or "")
        if trial is not None and trial not in out:
            value = _result(pod)
            if value is not None:
                out[trial] = value
    return out


def trial_results(
    cluster: Cluster, namespace: str, study: str, jobs: dict[str, dict[str, Any]], chunk: int = 100
) -> dict[str, dict[str, Any]]:
    """The results of these trials (trial name → the result of its given job, the latest
    attempt), from their pods that reached a node: a few lists, `chunk` trials (or blocks,
    for trials read from a block) each."""
    by_job = {job["metadata"]["name"]: trial for trial, job in jobs.items()}
    blocks = sorted({b for job in jobs.values() if (b := (job["metadata"].get("labels") or {}).get(labels.IN_BLOCK))})
    names = sorted(t for t, job in jobs.items() if labels.IN_BLOCK not in (job["metadata"].get("labels") or {}))
    results: dict[str, dict[str, Any]] = {}
    for i in range(0, len(names), chunk):
        selector = f"{labels.STUDY}={study},{labels.TRIAL} in ({','.join(names[i : i + chunk])})"
        _read_pods(cluster, namespace, selector, results, {})
    for i in range(0, len(blocks), chunk):  # a block's pods carry its name, not their trials'
        selector = f"{labels.STUDY}={study},{labels.BLOCK} in ({','.join(blocks[i : i + chunk])})"
        _read_pods(cluster, namespace, selector, results, {})
    return {by_job[job]: value for job, value in results.items() if job in by_job}


def collect(
    cluster: Cluster,
    namespace: str,
    study: str | None = None,
    now: float | None = None,
    reasons_for_all: bool = True,
    shown: int | None = None,
    selector: str | None = None,
    every_trial: bool = False,
) -> Snapshot:
    """One consistent-enough picture of the namespace's studies (or one study).

    `shown=None` reads every trial. `shown=N` reads only what a table of the first N
    trials needs, using each study's fresh summary where there is one (module docstring);
    `shown=0` only the studies' rows. With `reasons_for_all` false the PodGroups are not
    listed (the list costs as much as the jobs'); `explain_pending` then fetches the
    reasons of the few rows shown. `selector` picks studies by their records' labels.
    With `every_trial`, the trials not created yet are listed too, and every trial has its
    parameters (roster.py: from the study its record keeps).
    """
    now = time.time() if now is None else now
    cms = records(cluster, namespace, study, selector)
    kept = [(cm, summary_of(cm, now, FRESH) if shown is not None else None) for cm in cms]  # (record, fresh summary)
    full = [cm for cm, summary in kept if summary is None]
    studies: dict[str, StudyRow] = {}
    trials: list[TrialRow] = []
    total = 0
    if full:
        names = [parse_record(cm).study for cm in full]
        selector = f"{labels.STUDY}={study}" if study else f"{labels.STUDY} in ({','.join(names)})"
        early = None
        if study and shown and not reasons_for_all:
            # why the first `shown` trials wait (an events scan or two) is found while every job is read
            helper = ThreadPoolExecutor(1)
            early = helper.submit(_explained_first, cluster, namespace, full[0], now, shown)
            helper.shutdown(wait=False)
        rows_of_studies, rows = _read_all(cluster, namespace, full, selector, now, reasons_for_all)
        if early is not None:
            _carry_reasons(early.result(), rows)
        if every_trial:
            rows = roster.every_trial(full, rows)
        studies.update((r.study, r) for r in rows_of_studies)
        trials.extend(rows)
        total += len(rows)
    for cm, summary in kept:
        if summary is None:
            continue
        first, complete = _first_trials(cluster, namespace, cm, now, shown) if shown else ([], False)
        if complete:  # every trial was read: count them, not the summary of a moment ago
            summary = study_row(parse_record(cm), first, now)
        listed = False  # whether the trials not created yet have rows
        if every_trial and shown and (summary.states.get(TrialState.WAITING.value) or any(not r.params for r in first)):
            first, listed = roster.first_trials(parse_record(cm), first, complete, shown)
        studies[summary.study] = summary
        total += summary.trials - (0 if listed else summary.states.get(TrialState.WAITING.value, 0))
        trials.extend(first[:shown])
    ordered = [studies[name] for name in (parse_record(cm).study for cm in cms) if name in studies]
    if study and ordered:  # one study: who drives it (its Lease; none when no loop runs)
        ordered[0] = replace(ordered[0], driver=driver_of(cluster, namespace, study, now))
    trials.sort(key=lambda r: (r.study, r.trial))
    return Snapshot(namespace, now, ordered, trials, total_trials=total if shown is not None else None)


def _explained_first(cluster: Cluster, namespace: str, cm: dict[str, Any], now: float, n: int) -> list[TrialRow]:
    rows, _ = _first_trials(cluster, namespace, cm, now, n)
    explain_pending(cluster, namespace, rows)
    return rows


def _carry_reasons(explained: list[TrialRow], rows: list[TrialRow]) -> None:
    """Reasons found for an earlier read of a trial, onto the rows of the full read where
    the trial still waits in the same attempt (others are left for `explain_pending`)."""
    why = {(r.trial, r.job): r.pending for r in explained if r.pending}
    for row in rows:
        if row.state == TrialState.PENDING.value and not row.pending:
            row.pending = why.get((row.trial, row.job), "")


def namespaces_with_studies(cluster: Cluster, selector: str | None = None) -> list[str]:
    """The namespaces holding study records (for `--all-namespaces`)."""
    return sorted(
        {cm["metadata"].get("namespace", "") for cm in records(cluster, None, None, selector, all_namespaces=True)}
    )


def _read_all(
    cluster: Cluster, namespace: str, cms: list[dict[str, Any]], selector: str, now: float, reasons_for_all: bool
) -> tuple[list[StudyRow], list[TrialRow]]:
    """Every job, (PodGroup,) and started pod of the studies, as rows."""
    jobs: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    reasons: dict[str, str] = {}  # job name -> why pending
    results: dict[str, dict[str, Any]] = {}  # job name -> result
    starts: dict[str, float] = {}  # job uid -> when its first pod started
    exits: dict[str, tuple[int, str]] = {}  # job name -> exit code and reason of a failed container

    lock = threading.Lock()

    blocks: list[dict[str, Any]] = []  # merged submissions: read as their trials once their pods are read
    block_pods: list[dict[str, Any]] = []

    def read_jobs(kind: tuple[str, str], part: str) -> None:
        for items in _pages(cluster, kind, namespace, part):
            with lock:
                blocks.extend(j for j in items if is_block(j))
                _keep_latest(jobs, [j for j in items if not is_block(j)])

    queues = Queues(cluster)

    def read_podgroups(part: str) -> None:
        for items in _pages(cluster, PODGROUP, namespace, part):
            for pg in items:
                owner, why = _owner_job(pg), pending_reason(pg, queues)
                if owner and why:
                    reasons[owner] = why

    kinds = sorted({kind for cm in cms for kind in job_kinds(parse_record(cm).source)})
    readers: list[Callable[[], Any]] = [partial(read_jobs, kind, part) for kind in kinds for part in shards(selector)]
    merged = any(BATCH_JOB in job_kinds(parse_record(cm).source) for cm in cms)
    # a block's pods, each read once: for its trials' states (pending ones too) and results
    pod_sets = [(f"{selector},!{labels.BLOCK}", None), (f"{selector},{labels.BLOCK}", block_pods)] if merged else []
    readers += [partial(_read_pods, cluster, namespace, part, results, starts, exits, keep) for part, keep in pod_sets]
    readers += [] if merged else [lambda: _read_pods(cluster, namespace, selector, results, starts, exits)]
    readers += [partial(read_podgroups, part) for part in shards(selector)] if reasons_for_all else []
    with ThreadPoolExecutor(len(readers)) as pool:
        for future in [pool.submit(reader) for reader in readers]:
            future.result()
    if blocks:
        _keep_latest(jobs, expand(blocks, block_pods)[0])
    return build(now, cms, jobs, reasons, results, starts, exits)


def _trials_of_blocks(
    cluster: Cluster, namespace: str, items: list[dict[str, Any]], kept: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The jobs with each block (merged submissions) read as its trials' views, from the
    block and its pods (blocks.expand, the pods read kept in `kept`); the same list when it
    holds no block."""
    named = [j["metadata"]["name"] for j in items if is_block(j)]
    if not named:
        return items
    pods = [pod for name in named for pod in cluster.list(POD, namespace, label_selector=f"{labels.BLOCK}={name}")[0]]
    kept.extend(pods)
    return expand(items, pods)[0]


def shards(selector: str) -> list[str]:
    """The selector in parts listed at once: one per shard label value, and one for the
    objects of a stratctl that set none. The API server serialises one list on one core;
    in parts, every core of it works, and this process parses one part while it waits for
    the others."""
    return [f"{selector},{labels.SHARD}={s}" for s in range(labels.SHARDS)] + [f"{selector},!{labels.SHARD}"]


def _keep_latest(jobs: dict[tuple[str, str], tuple[int, dict[str, Any]]], items: list[dict[str, Any]]) -> None:
    for key, (attempt, slim) in latest_slim(items).items():
        if key not in jobs or attempt > jobs[key][0]:
            jobs[key] = (attempt, slim)


def _first_trials(
    cluster: Cluster, namespace: str, cm: dict[str, Any], now: float, n: int
) -> tuple[list[TrialRow], bool]:
    """The first `n` trials of a study by name, from the first page(s) of its jobs, and
    whether those pages held every trial (then all of them are returned).

    Jobs come in name order and a trial's attempts (`T`, `T-a1`, ...) are adjacent, so
    once n + 1 trials are seen the first n are complete; trials known only to the record
    (suspended, cleaned up) are merged in up to the last name read.
    """
    record = parse_record(cm)
    selector = f"{labels.STUDY}={record.study}"
    jobs: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    complete, block_pods = True, list[dict[str, Any]]()
    for kind in job_kinds(record.source):
        for items in _pages(cluster, kind, namespace, selector, page=n + 10):
            _keep_latest(jobs, _trials_of_blocks(cluster, namespace, items, block_pods))
            if len(jobs) > n:
                complete = False
                break
        if not complete:
            break
    last = max((trial for _, trial in jobs), default="") if not complete else None
    results: dict[str, dict[str, Any]] = {}
    starts: dict[str, float] = {}
    exits: dict[str, tuple[int, str]] = {}
    shown = sorted(
        trial
        for (_, trial), (_, slim) in jobs.items()
        if (last is None or trial < last) and classify(slim) is not TrialState.PENDING
    )
    if shown:
        _read_pods(cluster, namespace, f"{selector},{labels.TRIAL} in ({','.join(shown)})", results, starts, exits)
    _take_pods(block_pods, results, starts, exits)  # a block's pods carry its name, not their trials': read above
    _, rows = build(now, [cm], jobs, {}, results, starts, exits)
    rows = sorted((r for r in rows if last is None or r.trial < last), key=lambda r: r.trial)
    return (rows, True) if complete else (rows[:n], False)


def declared_ranking(cluster: Cluster, namespace: str, study: str) -> str | None:
    """The ranking the study's objective declares (`loss`, or `-accuracy` to maximise; the
    first objective of several), as its record keeps the study; None without one."""
    try:
        record = parse_record(cluster.get(CONFIGMAP, record_name(study), namespace))
    except NotFound:
        return None
    try:
        spec = json.loads(record.spec) if record.spec else yaml.safe_load(record.source)
    except ValueError:  # yaml's errors are ValueErrors too
        return None
    objective = spec.get("objective") if isinstance(spec, dict) else None
    first = objective[0] if isinstance(objective, list) and objective else objective
    if not isinstance(first, dict) or not isinstance(first.get("metric"), str):
        return None
    metric: str = first["metric"]
    return ("-" if first.get("direction") == "maximize" else "") + metric


def best_trial(cluster: Cluster, namespace: str, study: str, ranking: str | None = None) -> tuple[TrialRow, str] | None:
    """The study's best succeeded trial that reports the ranking's metric, and the ranking
    used: the one given, else the study's objective, else a guess from the metrics reported."""
    rows = collect(cluster, namespace, study, reasons_for_all=False).trials
    return best_of(rows, ranking or declared_ranking(cluster, namespace, study))


def driver_of(cluster: Cluster, namespace: str, study: str, now: float) -> str:
    """Who drives the study, as its live driver mark says ("" when no loop holds it)."""
    try:
        mark, _ = LeaseStore(cluster, namespace, study).read()
    except ClusterError:  # no right to read Leases: the table goes on without it
        return ""
    if mark is None or not mark.live(now):
        return ""
    return f"{mark.holder} since {time.strftime('%H:%M:%S', time.localtime(mark.since))}"
