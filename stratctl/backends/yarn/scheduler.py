"""The YARN backend behind the attempt seam (backends/batch/scheduler.py): what the shared attempt
loop, `status`, `drain` and `resume` ask of a batch scheduler, through the ResourceManager's
REST API (backends/yarn/rest.py) and the files each attempt leaves in its output directory.

- An attempt is one application (backends/yarn/app.py) whose AM is stratctl's gang AM: it starts the
  trial's N containers together once all N are allocated, never fewer.
- Created in two requests, `new-application` then the submission, each through the shared
  token bucket and retry policy. Exactly once: the attempt's own tag is looked up before a
  submission whose answer was lost is sent again.
- Its state is the RM's while the RM remembers it, then its record's (backends/yarn/state.py).
- Capacity is the RM's view: the free `yarn.io/gpu` of each RUNNING node (of the study's
  node label, when it has one), no more in all than the study's queue may still take
  (its maximum effective capacity less what it uses, from /scheduler).
- The queue's application limits are pressure, not failures: an application waiting for
  `maxParallelApps` or the AM resource limit is pending for limits; one refused for
  `maximum-applications` is no failure of its trial (its next attempt is due), and holds
  new submissions for a while (Throttled, as a 429 would).
- A trial's result and its reports travel through YARN, no shared filesystem assumed: the
  containers post them to the gang AM (yarn-am/Reports.java, its tracking URL); reports of a
  running attempt are read through the RM's web proxy (`/proxy/<app>/reports`), the result
  from the AM's final diagnostics, kept in the attempt's record. A pruned attempt is killed
  (the NodeManager's SIGTERM, then SIGKILL after its sleep-delay-before-sigkill) and ends
  failed: never drained, preempted nor resumed.
- YARN cannot hold an application: `drain` kills each pending or running attempt and marks
  it drained; `resume` submits each drained trial's next attempt at once, which resumes
  from its checkpoint (a drain is neither a failure nor a preemption).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from stratctl.attempt import Attempt, Counted, StudyFiles
from stratctl.backends.batch.scheduler import study_directory
from stratctl.backends.batch.search import study_trials
from stratctl.backends.yarn.app import AM_JAR, Application, Jar, build, queues_of, study_tag
from stratctl.backends.yarn.rest import ResourceManager
from stratctl.backends.yarn.state import (
    ENDED,
    latest,
    outcome,
    read_records,
    result_of,
    trial_records,
    write_record,
)
from stratctl.core.render import Renderer, bundled_templates
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.errors import Invalid, NotFound, Throttled, Unavailable, UsageError
from stratctl.run.driver import gone
from stratctl.trial.metrics import parse_report_record
from stratctl.trialstate import TrialState

REFUSED_HOLD = 10.0  # seconds without a submission after the queue refused one for its application limits
GPU = "yarn.io/gpu"


def output_of(study: Study, workdir: Path | str | None = None) -> Path:
    """Where a study's attempts write their results and records: its study directory
    (backends/batch/scheduler.py), absolute (the containers run elsewhere) and the same from every
    working directory (`workdir`: the directory a relative `output_dir` is resolved against
    instead of the study file's)."""
    return study_directory(study, workdir)


def built_jar() -> Path:
    """Where `make yarn-am` (yarn-am/build.sh) writes the gang AM's jar: a cache outside the
    installed package, the same for a source checkout and a wheel."""
    cache = Path(os.environ.get("STRATCTL_YARN_CACHE") or Path.home() / ".cache" / "stratctl" / "yarn")
    return cache / "am" / AM_JAR


def am_jar(study: Study, given: Path | None = None) -> tuple[Path, str]:
    """The gang AM's jar a study uses and what named it: the study's yarn.am_jar, else the
    one given, else STRATCTL_YARN_AM_JAR, else the built one."""
    if study.yarn.am_jar:
        return Path(study.yarn.am_jar), "the study's yarn.am_jar"
    if given is not None:
        return given, "the jar given"
    if os.environ.get("STRATCTL_YARN_AM_JAR"):
        return Path(os.environ["STRATCTL_YARN_AM_JAR"]), "STRATCTL_YARN_AM_JAR"
    return built_jar(), "where `make yarn-am` writes it"


def missing_jar(study: Study, path: Path, named: str) -> UsageError:
    """One line: where the jar was looked for, how to build it, how to name another."""
    build = "`make yarn-am` in a stratctl source checkout (yarn-am/build.sh, needs a JDK and Maven"
    built = built_jar()
    where = (
        f"{path}, where `make yarn-am` writes it: build it with {build})"
        if path == built
        else f"{path} ({named}): build one with {build}; it writes {built})"
    )
    return UsageError(
        f"{study.name}: no gang application master jar at {where}, or name the jar with "
        "STRATCTL_YARN_AM_JAR or the study's yarn.am_jar (a path every NodeManager reads)"
    )


def free_gpus(nodes: list[dict[str, Any]], label: str | None) -> list[int]:
    """Free GPUs of each RUNNING node (of the node label, when one is set) from /nodes."""
    out = []
    for node in nodes:
        if node.get("state") != "RUNNING":
            continue
        if label and label not in (node.get("nodeLabels") or []):
            continue
        out.append(max(0, _gpus(node.get("availableResource"))))
    return out


def queue_of(scheduler: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The Capacity Scheduler's view of one queue (by its name or its path) in /scheduler."""

    def walk(queues: dict[str, Any] | None) -> dict[str, Any] | None:
        queue: dict[str, Any]
        for queue in (queues or {}).get("queue") or []:
            if name in (queue.get("queueName"), queue.get("queuePath"), f"root.{queue.get('queueName')}"):
                return queue
            found = walk(queue.get("queues"))
            if found is not None:
                return found
        return None

    info = (scheduler.get("scheduler") or {}).get("schedulerInfo") or {}
    return walk(info.get("queues"))


def headroom(queue: dict[str, Any] | None) -> int | None:
    """GPUs the queue may still take: its maximum effective capacity less what it uses
    (None when the RM does not say: no queue of that name, another scheduler)."""
    if not queue or "maxEffectiveCapacity" not in queue:
        return None
    return max(0, _gpus(queue.get("maxEffectiveCapacity")) - _gpus(queue.get("resourcesUsed")))


def queue_limit(queue: dict[str, Any] | None) -> str:
    """Which of the queue's limits keeps its accepted applications from starting, in YARN's
    words ("" when none is reached): the RM lists such an application ACCEPTED with no
    diagnostics at all."""
    if not queue:
        return ""
    active, cap = queue.get("numActiveApplications") or 0, queue.get("maxParallelApps")
    if isinstance(cap, int) and 0 < cap <= active:
        return f"the queue's maxParallelApps ({cap}) are running"
    limit, used = queue.get("AMResourceLimit") or {}, queue.get("usedAMResource") or {}
    if (
        limit
        and used
        and (used.get("memory", 0) >= limit.get("memory", 1) or used.get("vCores", 0) >= limit.get("vCores", 1))
    ):
        return "the queue's AM resource limit (maximum-am-resource-percent) is reached"
    return ""


def within(free: list[int], limit: int | None) -> list[int]:
    """Free GPUs per node, no more in all than the queue's headroom."""
    if limit is None:
        return free
    out = []
    for gpus in free:
        out.append(min(gpus, limit))
        limit -= out[-1]
    return out


def values_of(text: str, metric: str) -> dict[int, float]:
    """Step → value of `metric` in the gang AM's reports (JSON lines, one per step, the
    lowest rank's); a line without the metric or not a report is skipped."""
    out = {}
    for line in text.splitlines():
        parsed = parse_report_record(line)
        if parsed is not None and metric in parsed[2]:
            out[parsed[0]] = parsed[2][metric]
    return out


def _gpus(resource: dict[str, Any] | None) -> int:
    infos = ((resource or {}).get("resourceInformations") or {}).get("resourceInformation") or []
    return sum(int(i.get("value") or 0) for i in infos if i.get("name") == GPU)


class YarnScheduler(StudyFiles, Counted):
    kind, title, controller = "yarn", "YARN", "YARN ResourceManager"
    create_command = "submissions"  # the request that creates an attempt, as the submit summary counts it
    limit_words = "application limits"  # what a refusal to create is, in YARN's words
    calls_word = "requests"  # REST requests to the ResourceManager

    def __init__(
        self,
        study: Study,
        renderer: Renderer | None = None,
        rm: ResourceManager | None = None,
        workdir: str | None = None,
        jar: Path | None = None,
    ):
        self.study = study
        self.rm = rm or ResourceManager(study.yarn.resource_managers, user=study.yarn.user)
        self.client = self.rm
        self.renderer = renderer or Renderer(study, rendezvous=None)  # the application master gives the contract
        self.output = output_of(study, workdir)
        self._jar_path = jar
        self._seen_ended: set[str | None] = set()
        self._refused_until = 0.0  # no submission before this (clock): the queue refused some for its limits
        self.clock = time.monotonic

    @property
    def where(self) -> str:
        return f"yarn:{','.join(self.queues)}"

    @property
    def queue(self) -> str:
        return self.queues[0]

    @property
    def queues(self) -> tuple[str, ...]:
        """The study's queues in order: its applications start in the first (batch/moves.py)."""
        return queues_of(self.study)

    # -- observe ---------------------------------------------------------------------------

    def attempts(self, marks: bool = True) -> dict[str, Attempt]:
        """Each trial's latest attempt (`marks`: also those the RM has forgotten). An ended
        application seen for the first time is recorded in its trial's directory."""
        apps = self.rm.apps(study_tag(self.study.name), self.study.yarn.application_type)
        for app in apps:
            app_id = app.get("id")
            if app.get("state") in ENDED and app_id not in self._seen_ended:
                found = latest([app], self.study.name, {}, {})
                for trial, attempt in found.items():
                    write_record(self.output, trial, attempt.attempt, app)
                if outcome(app) == "refused":
                    self.rm.refused["submissions"] = self.rm.refused.get("submissions", 0) + 1
                    self._refused_until = self.clock() + REFUSED_HOLD
                self._seen_ended.add(app_id)
        records, drain_marks = read_records(self.output)
        seen = latest(apps, self.study.name, records if marks else {}, drain_marks)
        unsaid = [t for t, a in seen.items() if a.native_state == "ACCEPTED" and not a.reason]
        if unsaid:  # accepted and silent: held back by a queue limit, or about to get its AM container
            view = self.rm.scheduler()
            for trial in unsaid:
                why = queue_limit(queue_of(view, seen[trial].queue or self.queue))
                if why:
                    seen[trial] = replace(seen[trial], reason=why, waits_for_limits=True, waits_for_capacity=False)
        return seen

    def free_gpus(self) -> list[int]:
        """Free GPUs of each usable node, as many as the study's queues may still take."""
        free = free_gpus(self.rm.nodes(), self.study.yarn.node_label)
        view = self.rm.scheduler()
        rooms = [headroom(queue_of(view, name)) for name in self.queues]
        return within(free, None if None in rooms else sum(r for r in rooms if r is not None))

    def result(self, trial: str) -> dict[str, Any] | None:
        """The trial's result: the one its latest attempt with a result sent the gang AM,
        from the ended application's diagnostics as its record keeps them (written by
        `attempts` when it first saw it ended: the RM forgets). Else `result.json` in its
        output directory, for a trial that writes it itself on a filesystem shared with
        this machine."""
        records = trial_records(self.output, trial)
        for number in sorted(records, reverse=True):
            found = result_of(records[number].get("diagnostics"))
            if found is not None:
                return found
        return super().result(trial)

    # -- a closed-loop search's pruner (batch/scheduler.py: Searching) -----------------------

    def reports(self, attempt: Attempt, metric: str) -> dict[int, float]:
        """A running attempt's values of `metric` so far (step → value), from its gang AM
        through the RM's web proxy; {} when it does not run or its AM cannot be read now."""
        if not attempt.job or attempt.state is not TrialState.RUNNING:
            return {}
        try:
            text = self.rm.proxied(attempt.job, "reports")
        except (NotFound, Unavailable, Invalid):
            return {}  # ended meanwhile, or its AM not answering: the next look tells
        return values_of(text or "", metric)

    def prune(self, attempt: Attempt) -> None:
        """Stop a running attempt the pruner judged: its application killed (each container
        gets SIGTERM, then SIGKILL after the NodeManager's sleep-delay-before-sigkill), its
        GPUs free at once. No drain mark: it ends failed, never resumed."""
        if not attempt.job:
            return
        try:
            self.rm.kill(attempt.job)
        except NotFound:
            pass  # the RM forgot it: it ended

    def room(self, queue: str) -> int | None:
        """GPUs the queue may still take: its maximum effective capacity less what it uses."""
        return headroom(queue_of(self.rm.scheduler(), queue))

    def move(self, attempt: Attempt, queue: str) -> None:
        """Move a waiting attempt's application to `queue` (queue fallback, batch/moves.py)."""
        self.rm.move(attempt.job, queue)

    # -- create ----------------------------------------------------------------------------

    @functools.cached_property
    def jar(self) -> Jar:
        path, named = am_jar(self.study, self._jar_path)
        if not path.is_file():
            raise missing_jar(self.study, path, named)
        try:
            return Jar.of(path)
        except OSError:
            raise missing_jar(self.study, path, named) from None

    @functools.cached_property
    def classpath(self) -> list[str]:
        if self.study.yarn.classpath is not None:
            return list(self.study.yarn.classpath)
        value = self.rm.conf("yarn.application.classpath")
        if not value:
            raise UsageError(
                f"{self.study.name}: the ResourceManager does not say yarn.application.classpath: set "
                "yarn.classpath in the study (the Hadoop classpath of an application master)"
            )
        return [entry.strip() for entry in value.split(",") if entry.strip()]

    def prepare(self, trial: Trial, number: int) -> Application:
        """Attempt `number` of `trial`, ready to send: its application."""
        app = self._build(trial, number)
        (self.output / trial.name).mkdir(parents=True, exist_ok=True)
        return app

    def _build(self, trial: Trial, number: int) -> Application:
        return build(
            self.study,
            self.renderer.render(trial, attempt=number, resume=number > 0),
            [self.renderer.dir, bundled_templates()],
            self.output,
        )

    def check(self, trial: Trial) -> None:
        """Build the first attempt without sending it (a client dry run), the AM's jar found."""
        self._build(trial, 0)
        _ = self.jar  # a missing jar is said by the dry run, not first by the submission

    def create(self, app: Application) -> None:
        wait = self._refused_until - self.clock()
        if wait > 0:  # the queue refused the study's applications for its limits a moment ago: pressure
            raise Throttled(
                "the queue refused applications for its application limits (maximum-applications): "
                "holding new submissions",
                retry_after=wait,
            )
        jar = self.jar  # a missing jar ends the submit before the RM hands out an application id
        body = app.body(self.rm.new_application(), self.study, jar, self.classpath)
        self.rm.submit(body)

    def find(self, app: Application) -> bool:
        """Whether the RM knows this attempt already (a submission whose answer was lost)."""
        return bool(self.rm.apps(app.tag, self.study.yarn.application_type))

    # -- suspend and bring back ------------------------------------------------------------

    def _kill_drained(self, attempt: Attempt) -> None:
        mark = self.output / attempt.trial / f"attempt-{attempt.attempt}.drained"
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(f"{attempt.job} killed by stratctl drain; `stratctl resume` submits the next attempt\n")
        try:
            self.rm.kill(attempt.job)
        except NotFound:
            raise Invalid(f"{attempt.job}: no longer known to the ResourceManager") from None

    hold = stop = _kill_drained  # YARN has no hold: a drained attempt is killed and marked

    def give_up(self, attempt: Attempt, reason: str) -> None:
        """Recovery gave the trial up: marked, then its application killed if it still runs or waits."""
        self.mark_given_up(attempt.trial, reason)
        if attempt.job and attempt.state.in_flight:
            try:
                self.rm.kill(attempt.job)
            except NotFound:
                pass  # the RM forgot it: it ended

    def log_files(self, trial: str, name: str) -> list[tuple[str, Path]]:
        """The logs of attempt `name` of a trial: each container's copy of what it printed,
        `<name>.<task>-<index>.log` (templates/yarn-task.sh.j2), as `<task>-<index>`."""
        found = sorted((self.output / trial).glob(f"{name}.*-*.log"))
        return [(path.name[len(name) + 1 : -len(".log")], path) for path in found]

    def cancel(self, attempt: Attempt) -> None:
        """End a pending or running attempt (`stratctl delete`): its application killed."""
        try:
            self.rm.kill(attempt.job)
        except NotFound:
            pass  # the RM forgot it: it ended

    # -- its driver: a loop that runs where `submit` ran (no `--in-cluster` on YARN) ----------

    def driver_gone(self, holder: str) -> bool:
        return gone(holder)

    def driver(self) -> int | None:
        return None

    def stop_driver(self) -> list[int]:
        return []

    def release(self, attempt: Attempt) -> None:
        """Submit the drained trial's next attempt (it resumes from its checkpoint)."""
        trial = next((t for t in study_trials(self.study) if t.name == attempt.trial), None)
        if trial is None:
            return
        mark = self.output / attempt.trial / f"attempt-{attempt.attempt}.drained"
        app = self.prepare(trial, attempt.attempt + 1)
        if not self.find(app):
            self.create(app)
        mark.replace(mark.with_suffix(".resumed"))
