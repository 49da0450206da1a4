"""`stratctl submit` wired end to end: load, expand and render everything, connect, run.

The one core call the CLI makes; everything it assembles (throttle, cluster adapter,
signals, submit loop) is built here, so each of those stays ignorant of the others'
construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratctl.backends import rendezvous_for
from stratctl.backends.batch.scheduler import cwd_directory, is_attempt_backend
from stratctl.backends.kubernetes.api.connect import (
    START_PATIENCE,
    Connection,
    connect,
    preflight_gated,
    tell_throttling,
)
from stratctl.core import capabilities
from stratctl.core.merging import merging
from stratctl.core.render import Renderer
from stratctl.core.space import Trial, corners, expand
from stratctl.core.spec import Study, load_study
from stratctl.errors import StillThrottled, StudyError, StudyMoved
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import AdaptivePolicy, StaticPolicy
from stratctl.run.progress import Progress, Reporter, Silent
from stratctl.run.throttle import Throttle

# The Kubernetes loop's modules are imported where a Kubernetes study needs them: a Slurm or
# YARN submit does not load the Kubernetes client's (about 70 ms of its start).
if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.blocks.blockmanifests import Part
    from stratctl.backends.kubernetes.loop.controller import Submitter
    from stratctl.run.storage import StorageMirror


@dataclass(frozen=True)
class Prepared:
    """A study loaded, expanded and rendered: everything `submit` needs before the cluster."""

    study: Study
    trials: list[Trial]
    renderer: Renderer
    manifests: dict[
        str, list[dict[str, Any]]
    ]  # trial name -> manifests of its first attempt, for the first KEPT trials
    shapes: list[list[dict[str, Any]]]  # the manifests of one trial of each distinct pod shape (what preflight fits)
    parts: dict[str, Part] = field(default_factory=dict)  # merged: what each trial's block keeps of it


KEPT = 2_000  # first attempts kept rendered; later trials render again when their turn comes
CHUNK = 500


def prepare(path: str | Path | Study, namespace: str | None = None, options: SubmitOptions | None = None) -> Prepared:
    """Load, expand and render the whole study before anything touches the cluster.

    Rendering every trial up front is what makes a bad template or value fail the
    command with nothing created, instead of failing trial 173 after 172 were submitted.
    The manifests of the first KEPT trials in submission order are kept, so the first
    creates render nothing twice; the rest are rendered, checked and dropped (rendering
    runs at about 14,000 trials/s), so memory does not grow with the manifests: 148 MiB
    for 100,000 trials, against 86 MiB for 10,000 (bench/scale_bench.py).
    """
    study = path if isinstance(path, Study) else load_study(path)
    if options is not None:  # an option the study's backend cannot honour: refused before anything renders
        capabilities.refuse_options(study, options.given())
    if namespace and namespace != study.namespace:
        study = study.with_namespace(namespace)
    trials = expand(study)
    renderer = Renderer(study, rendezvous=rendezvous_for(study))
    if study.cost.per_trial and study.throttle.order == "longest-first":
        # Longest expected first (LPT): the last trials to start are short ones, so the
        # study does not end with a few long trials running on an otherwise idle cluster.
        seconds = {t.name: renderer.expected_seconds(t) for t in trials}
        trials = sorted(trials, key=lambda t: -seconds[t.name])
    manifests: dict[str, list[dict[str, Any]]] = {}
    shapes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    kubernetes = study.backend == "kubernetes"  # the pod shapes are what its preflight fits
    merged = merging(study).merged and kubernetes
    if kubernetes:
        from stratctl.backends.kubernetes.blocks.blockmanifests import job_of, part_of, pod_key
        from stratctl.backends.kubernetes.objects.podfit import pods_of, shape_key
    parts: dict[str, Part] = {}
    keys: dict[tuple[Any, ...], dict[str, Any]] = {}  # a shape's first trial's pod key (blockmanifests.pod_key)
    for start in range(0, len(trials), CHUNK):
        chunk = trials[start : start + CHUNK]
        for trial, docs in zip(chunk, renderer.render_all(chunk, attempt=0)):
            if len(manifests) < KEPT:
                manifests[trial.name] = docs
            if not kubernetes:
                continue
            shape = shape_key(pods_of(docs))
            first = shapes.setdefault(shape, docs)
            if merged:  # trials share a block only when their pods differ in command and env alone
                if shape not in keys:
                    keys[shape] = pod_key(job_of(first))
                _mergeable(study, keys[shape], docs, f"trial {trial.index} ({trial.name})")
                parts[trial.name] = part_of(trial, docs)
    if merged and study.strategy.closed_loop:  # the trials a search asks later must share its blocks too
        probes = corners(study)
        for where, docs in zip(("low", "high"), renderer.render_all(probes, attempt=0)):
            shape = shape_key(pods_of(docs))
            key = keys.get(shape) or pod_key(job_of(shapes.get(shape, docs)))
            _mergeable(study, key, docs, f"a trial at the space's {where} end (every parameter at its {where}est)")
    return Prepared(study, trials, renderer, manifests, list(shapes.values()), parts)


def _mergeable(study: Study, first: dict[str, Any], docs: list[dict[str, Any]], where: str) -> None:
    from stratctl.backends.kubernetes.blocks.blockmanifests import NotMergeable, mergeable

    try:
        mergeable(first, docs, where)
    except NotMergeable as exc:
        raise StudyError([study.problem(("merge",), str(exc))]) from None


def submit_study(
    path: str | Path | Study,
    connection: Connection = Connection(),
    options: SubmitOptions = SubmitOptions(),
    qps: float | None = None,
    burst: int | None = None,
    reporter: Reporter | None = None,
    policy: AdaptivePolicy | StaticPolicy | None = None,
    rerun_changed: bool = False,
) -> Progress:
    """`stratctl submit`: validate and render everything, then run the submit loop."""
    prepared = prepare(path, connection.namespace, options)
    study, trials, renderer = prepared.study, prepared.trials, prepared.renderer
    if is_attempt_backend(study):  # a batch scheduler that runs an attempt as one job (backends/batch/scheduler.py)
        return _submit_attempts(prepared, path, options, qps, burst, reporter, policy)
    from stratctl.backends.kubernetes.loop.controller import Submitter

    mirror = _storage(study, options)  # opened before the cluster is touched: a bad URL changes nothing
    throttle = _throttle(study, options, qps, burst, reporter)
    if options.dry_run == "client":
        return Submitter(
            study,
            trials,
            renderer,
            None,  # type: ignore[arg-type]  # a client dry run never reaches a cluster
            throttle,
            options,
            reporter=reporter,
            manifests=prepared.manifests,
        ).dry_run()
    cluster = connect(
        connection,
        study.namespace,
        throttle,
        options.outage_timeout,
        pool_size=max(options.workers, 4) * 2,
        first_patience=START_PATIENCE,
    )
    try:
        blind = _admit(cluster, throttle, prepared, connection, options, path, rerun_changed, reporter)
        submitter = Submitter(
            study,
            trials,
            renderer,
            cluster,
            throttle,
            options,
            policy=policy,
            reporter=reporter,
            source=study.text,
            manifests=prepared.manifests,
            parts=prepared.parts,
        )
        submitter.storage = mirror
        if study.merge == "auto" and reporter is not None:  # merged, or why not (as `plan` says)
            reporter.event(merging(study).why)
        _watch(submitter, cluster, study, options, blind, reporter)
        return _run(submitter)
    finally:
        cluster.close()


def _submit_attempts(
    prepared: Prepared,
    path: str | Path | Study,
    options: SubmitOptions,
    qps: float | None,
    burst: int | None,
    reporter: Reporter | None,
    policy: AdaptivePolicy | StaticPolicy | None,
) -> Progress:
    """`submit` on a batch scheduler: the study kept in its study directory and known by
    name (backends/batch/catalog.py), its loop's heartbeat there while it follows it (backends/batch/following.py)."""
    from stratctl.backends import scheduler_for
    from stratctl.backends.batch import catalog
    from stratctl.backends.batch.following import Heartbeat
    from stratctl.backends.batch.loop import submit_attempts

    study = prepared.study
    scheduler = scheduler_for(study, prepared.renderer, rendered=prepared.manifests)
    if options.dry_run:
        return submit_attempts(prepared, scheduler, options, qps, burst, reporter, policy)
    directory = Path(scheduler.output)  # type: ignore[attr-defined]  # every attempt scheduler's study directory
    _not_moved(study, directory, scheduler.controller)
    file = None if isinstance(path, Study) or str(path) == "-" else str(Path(path).resolve())
    catalog.keep(catalog.Entry(study.name, study.backend, str(directory), file, scheduler.where), study.text)
    heartbeat = Heartbeat(directory, reporter)
    heartbeat.beat()
    try:
        return submit_attempts(prepared, scheduler, options, qps, burst, heartbeat, policy)
    finally:
        heartbeat.stop()


def _not_moved(study: Study, directory: Path, controller: str) -> None:
    """Refuse a study whose trials' marks are where stratctl once put them, against the
    working directory: submitted from here, the trials the scheduler forgot would go again."""
    old = cwd_directory(study)
    if old is None or directory.exists() or not old.is_dir() or not any(old.iterdir()):
        return
    raise StudyMoved(
        f"{study.name}: its trials' marks are in {old} (output_dir was once resolved against the working "
        f"directory; it now is against the study file's), not in {directory}: move that directory there "
        f"(`mv {old} {directory}`), or this submit would send again every trial the {controller} has forgotten"
    )


def _storage(study: Study, options: SubmitOptions) -> StorageMirror | None:
    """The Optuna storage a closed-loop search is mirrored to (--storage), else None."""
    if not options.storage or options.dry_run:
        return None
    from stratctl.run.storage import StorageMirror

    return StorageMirror.open(options.storage, study)


def _throttle(
    study: Study, options: SubmitOptions, qps: float | None, burst: int | None, reporter: Reporter | None
) -> Throttle:
    """The client-side rate limit of the study's requests (flags over the study file's)."""
    qps = study.throttle.qps if qps is None else qps
    burst = study.throttle.burst if burst is None else burst
    # a storm of 429s is waited out for as long as an outage is (or --timeout, if sooner)
    bound = options.outage_timeout if options.timeout is None else min(options.outage_timeout, options.timeout)
    return tell_throttling(
        Throttle(qps=qps, burst=max(1, burst), concurrency=options.workers, patience=bound),
        (reporter or Silent()).event,
    )


def _admit(
    cluster: Cluster,
    throttle: Throttle,
    prepared: Prepared,
    connection: Connection,
    options: SubmitOptions,
    path: str | Path | Study,
    rerun_changed: bool,
    reporter: Reporter | None,
) -> str | None:
    """Before the study's record or any trial is written: refuse a study that cannot run
    here whole (`preflight`), and an edited study, or rerun its changed trials (`revise`).
    Returns what the loop goes without when it may not read nodes and pods."""
    from stratctl.backends.kubernetes.loop.controller import job_kind
    from stratctl.backends.kubernetes.verbs.preflight import preflight
    from stratctl.backends.kubernetes.verbs.revision import revise

    study = prepared.study
    try:
        blind = preflight(
            preflight_gated(cluster, throttle),
            study,
            prepared.shapes,
            namespace_flag=bool(connection.namespace),
            watch_cluster=not options.detach,
        )
    except StillThrottled as exc:
        raise StillThrottled(f"{exc}; nothing was created", status=exc.status, reason=exc.reason) from None
    if blind and reporter is not None:
        reporter.event(blind)
    if not options.dry_run:  # an edited study: refused, or its changed trials rerun, before the record is rewritten
        revise(
            cluster,
            study,
            prepared.trials,
            prepared.renderer,
            prepared.manifests,
            job_kind(study),
            rerun_changed,
            reporter or Silent(),
            file=str(path),
        )
    return blind


def _watch(
    submitter: Submitter,
    cluster: Cluster,
    study: Study,
    options: SubmitOptions,
    blind: str | None,
    reporter: Reporter | None,
) -> None:
    """Give the loop what it watches: the study's jobs, the queues when it falls back among
    several, and the cluster's nodes and pods when it adapts or yields (not with --detach)."""
    from stratctl.backends.kubernetes.api.cluster import QUEUE
    from stratctl.backends.kubernetes.loop.controller import job_kind, study_selector
    from stratctl.backends.kubernetes.objects.gpus import placements
    from stratctl.backends.kubernetes.watch.mirror import Mirror, trimmed_job

    jobs = Mirror(
        cluster,
        job_kind(study),
        all_namespaces=False,
        namespace=study.namespace,
        label_selector=study_selector(study),
        transform=trimmed_job,
    )
    submitter.jobs = jobs.start(follow=not options.detach)  # --detach watches from a second cycle on
    if len(study.queues) > 1:  # queue fallback: each new trial goes to the first queue with room
        submitter.queues = Mirror(cluster, QUEUE).start()
    # a static cap needs the cluster's signals only to see who it yields to
    yields = study.throttle.yield_to_higher_priority
    if options.detach and reporter is not None:
        reporter.event(
            "--detach: returns once every trial is created, not watching nodes and pods until then (no GPU "
            "signal, no yielding to higher-priority gangs); after it returns nothing resumes preempted trials "
            "nor asks a search for more. `submit --in-cluster` returns in seconds and keeps the study's loop "
            "running in the cluster"
        )
    if (options.parallelism == "adaptive" or yields) and not options.detach and not blind:
        from stratctl.backends.kubernetes.watch.capacity import (
            ClusterSignals,
        )  # its watches of nodes and pods: not for --detach

        submitter.signals = ClusterSignals(
            cluster,
            submitter.given.reference_shape(),
            study.namespace,
            study.priority_class,
            yields,
            study.queues,
            study.trial.network_topology,
            placements(study.trial),
        )
        if study.varying_shape:
            submitter.signals.own_study = study.name
        submitter.signals.start()


def _run(submitter: Submitter) -> Progress:
    """Run the loop, and stop everything it watched however it ends."""
    if submitter.prometheus is not None:
        submitter.prometheus.start()
    try:
        return submitter.run()
    finally:
        if submitter.prometheus is not None:
            submitter.prometheus.stop()
        if submitter.jobs is not None:
            submitter.jobs.stop()
        if submitter.queues is not None:
            submitter.queues.stop()
        if submitter.signals:
            submitter.signals.stop()
