"""The submit loop of a study on Slurm (`backend: slurm`): the same study, throttle,
policy and recovery rules as on Kubernetes, through Slurm's own commands.

Each cycle lists the study's jobs (`squeue --json`, one call) and reads the marks its
attempts left (slurm/state.py); asks the shared policy (engine/policy.py) how many trials
may be in flight, from Slurm's view: attempts pending for Resources or Priority are the
gangs waiting for GPUs, `sinfo --json` gives the free GPUs and the whole gangs they hold;
and submits that many trials' next attempts through the shared token bucket and retry
policy (engine/throttle.py). A failed attempt is retried as the next attempt while the
trial has failures left (retries.max_failures); a preempted one is requeued by Slurm
itself and resumes from its checkpoint (its restarts are counted, never as failures).

Exactly once, across crashes: an attempt is a job whose name and comment say which
(slurm/script.py). Before a trial is submitted the cycle has listed every job of the
study and read the marks of those Slurm no longer lists; a submit whose answer was lost
(a timeout: it may have gone through) is looked up by its job name before it is sent
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stratctl.engine.controller import SubmitOptions, default_policy
from stratctl.engine.policy import Observed
from stratctl.engine.progress import Progress, Reporter, Silent
from stratctl.engine.throttle import Throttle
from stratctl.errors import ClusterError, Unavailable, UsageError, transient
from stratctl.slurm.commands import Slurm
from stratctl.slurm.script import build
from stratctl.slurm.state import Attempt, latest, read_marks
from stratctl.study import shape
from stratctl.study.render import Renderer, bundled_templates
from stratctl.study.space import Trial
from stratctl.study.spec import Study
from stratctl.trialstate import TrialState


def free_gpus(nodes: list[dict], partition: str | None) -> list[int]:
    """Free GPUs of each usable node (in the partition, when one is set) from `sinfo --json`."""
    out = []
    for node in nodes:
        if partition and partition not in (node.get("partitions") or []):
            continue
        state = str(node.get("state") or "").lower()
        if any(word in state for word in ("down", "drain", "fail", "inval", "maint")):
            continue
        out.append(max(0, _gpus(node.get("gres")) - _gpus(node.get("gres_used"))))
    return out


def _gpus(gres: str | None) -> int:
    """GPUs in a GRES string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:0`, several comma-separated."""
    total = 0
    for part in (gres or "").split(","):
        fields = part.split("(")[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def gangs_fit(free: list[int], gang: list[int]) -> int:
    """Whole gangs (GPUs per task) the free GPUs hold, tasks packed node by node (first fit
    decreasing): fragmented GPUs that hold no task do not count."""
    per_task = max(gang) if gang else 0
    if per_task == 0:
        return sum(1 for _ in free) * 1000  # no GPUs asked: not the limit
    slots = sum(n // per_task for n in free)
    return slots // max(1, len(gang))


def trial_state(attempt: Attempt, max_failures: int) -> TrialState:
    """The trial's state from its latest attempt: a failed (or preempted and not requeued)
    attempt with failures left makes it RETRYING, its next attempt due. Every earlier
    attempt of the trial ended that way, so the attempt number counts them."""
    if attempt.state is TrialState.PREEMPTED or (attempt.state is TrialState.FAILED
                                                 and attempt.attempt < max_failures):
        return TrialState.RETRYING
    return attempt.state


class SlurmLoop:
    def __init__(self, study: Study, trials: list[Trial], renderer: Renderer, slurm: Slurm, throttle: Throttle,
                 options: SubmitOptions, reporter: Reporter | None = None, policy=None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 workdir: str | None = None):
        self.study, self.renderer, self.slurm, self.throttle = study, renderer, slurm, throttle
        self.trials = {t.name: t for t in trials}
        self.order = [t.name for t in trials]
        self.options = options
        self.reporter = reporter or Silent()
        self.policy = policy or default_policy(study, options)
        self.clock, self.sleep = clock, sleep
        self.workdir = workdir
        self.output = Path(workdir or ".") / study.slurm.output_dir / study.name
        self.progress = Progress(study=study.name, total=len(trials), backend="slurm")
        self.gang = shape.gang(study)
        self._pending_since: dict[str, float] = {}
        self.preemptions: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self._first = True

    # -- one cycle ------------------------------------------------------------------------

    def observe(self) -> dict[str, Attempt]:
        jobs = self.throttle.call(self.slurm.jobs)
        return latest(jobs, self.study.name, read_marks(self.output))

    def states(self, seen: dict[str, Attempt]) -> dict[str, TrialState]:
        """Each trial's state; a failed attempt with failures left is RETRYING (its next is due)."""
        from stratctl.engine.slurmdrain import drained

        draining = drained(self.study, Path(self.workdir) if self.workdir else None)
        out = {}
        for name in self.order:
            attempt = seen.get(name)
            if attempt is None:
                out[name] = TrialState.WAITING
                continue
            if attempt.state is TrialState.SUSPENDED or draining:  # `drain` requeues held: no preemption
                self.preemptions[name] = attempt.restarts
            elif attempt.restarts > self.preemptions.get(name, 0):
                self.reporter.event(f"trial {name}: preempted, requeued by Slurm (restart {attempt.restarts} of job "
                                    f"{attempt.job_id}): it resumes from its checkpoint; not a failure")
                self.preemptions[name] = attempt.restarts
            out[name] = trial_state(attempt, self.study.retries.max_failures)
            self.failures[name] = attempt.attempt + (attempt.state is TrialState.FAILED)
        return out

    def submit_attempt(self, trial: Trial, number: int) -> str:
        """Submit one attempt (looked up first when a previous send's answer was lost)."""
        script = build(self.study, self.renderer.render(trial, attempt=number, resume=number > 0),
                       [self.renderer.dir, bundled_templates()])
        # Slurm opens the job's --output file there before the script runs: it must exist
        (self.output / trial.name).mkdir(parents=True, exist_ok=True)
        sent = []

        def once() -> int:
            if sent:  # the last send may have gone through before its answer was lost
                found = self.slurm.find(script.job)
                if found is not None:
                    return found
            sent.append(True)
            return self.slurm.submit(script.text, self.workdir)

        self.throttle.call(once, mutating=True)
        return script.job

    def observed(self, seen: dict[str, Attempt], states: dict[str, TrialState]) -> Observed:
        now = self.clock()
        pending = [n for n, s in states.items() if s is TrialState.PENDING]
        for name in list(self._pending_since):
            if name not in pending:
                del self._pending_since[name]
        for name in pending:
            self._pending_since.setdefault(name, now)
        stuck = sum(1 for n in pending if seen[n].waits_for_capacity
                    and now - self._pending_since[n] > self.options.pending_grace)
        free = fit = None
        try:
            gpus = free_gpus(self.throttle.call(self.slurm.nodes), self.study.slurm.partition)
            free, fit = sum(gpus), gangs_fit(gpus, self.gang)
        except ClusterError:
            pass  # no capacity signal this cycle: the policy goes on without it
        from stratctl.engine.slurmdrain import drained

        return Observed(in_flight=sum(1 for s in states.values() if s.in_flight), pending=len(pending),
                        drained=drained(self.study, Path(self.workdir) if self.workdir else None),
                        waiting=sum(1 for s in states.values() if s in (TrialState.WAITING, TrialState.RETRYING)),
                        stuck=stuck, free_gpus=free, gangs_fit=fit)

    def cycle(self, pool: ThreadPoolExecutor) -> dict[str, TrialState]:
        seen = self.observe()
        if self._first:  # trials submitted before this run (a rerun, another launcher): recognised, not resent
            self.progress.existing, self._first = len(seen), False
        states = self.states(seen)
        observed = self.observed(seen, states)
        decision = self.policy.decide(observed, self.clock())
        admit = decision.admit(observed)
        due = [n for n in self.order if states[n] in (TrialState.WAITING, TrialState.RETRYING)][:admit]
        futures = {n: pool.submit(self.submit_attempt, self.trials[n], seen[n].attempt + 1 if n in seen else 0)
                   for n in due}
        for name, future in futures.items():
            try:
                future.result()
            except ClusterError as exc:
                if transient(exc):
                    self.reporter.event(f"trial {name}: not submitted this cycle ({exc}); trying again")
                    continue
                self.progress.errors[name] = str(exc)
                self.reporter.event(f"trial {name}: {exc}")
                continue
            if name in seen:
                self.reporter.event(f"trial {name}: attempt {seen[name].attempt + 1} submitted "
                                    f"(attempt {seen[name].attempt} {seen[name].state.value})")
            states[name] = TrialState.PENDING
            self.progress.created += 1
        self._count(states, decision)
        return states

    def _count(self, states: dict[str, TrialState], decision) -> None:
        p = self.progress
        counts = {s: 0 for s in TrialState}
        for name, state in states.items():
            counts[state if name not in p.errors else TrialState.FAILED] += 1
        p.pending, p.running = counts[TrialState.PENDING], counts[TrialState.RUNNING]
        p.succeeded, p.failed = counts[TrialState.SUCCEEDED], counts[TrialState.FAILED]
        p.waiting = counts[TrialState.WAITING] + counts[TrialState.RETRYING]
        p.target, p.hold, p.reason = decision.target, decision.hold, decision.reason
        p.api_requests = self.slurm.calls
        p.api_sent, p.api_refused = dict(self.slurm.sent), dict(self.slurm.refused)
        p.api_writes, p.throttled_429 = self.slurm.sent.get("sbatch", 0), sum(self.slurm.refused.values())
        p.throttle_waits, p.throttle_wait_seconds = self.throttle.bucket.waits, self.throttle.bucket.waited_seconds
        self.reporter.update(p)

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> Progress:
        started = self.clock()
        failed_cycles = 0
        with ThreadPoolExecutor(self.options.workers) as pool:
            while True:
                try:
                    states = self.cycle(pool)
                    failed_cycles = 0
                except Unavailable as exc:
                    failed_cycles += 1
                    self.reporter.event(f"Slurm controller: {exc}; trying again")
                    self.sleep(min(30.0, self.options.poll_interval * 2 ** failed_cycles))
                    continue
                except KeyboardInterrupt:
                    self.progress.interrupted = True
                    return self.progress
                p = self.progress
                if all(s.finished or n in p.errors for n, s in states.items()):
                    return p
                if self.options.detach and p.waiting == 0:
                    p.detached = True
                    return p
                if self.options.timeout is not None and self.clock() - started >= self.options.timeout:
                    p.timed_out = True
                    return p
                self.sleep(self.options.poll_interval)


def submit_slurm(prepared, options: SubmitOptions, qps: float | None, burst: int | None,
                 reporter: Reporter | None, policy=None, slurm: Slurm | None = None) -> Progress:
    """`stratctl submit` of a study whose backend is Slurm (the cluster its commands reach:
    SLURM_CONF and the rest of Slurm's environment)."""
    study = prepared.study
    unsupported = [what for what, given in (
        ("a closed-loop strategy", study.strategy.closed_loop), ("--storage", options.storage),
        ("--dry-run server", options.dry_run == "server"), ("--prometheus-url", options.prometheus_url),
        ("--move-waiting", options.move_waiting)) if given]
    if unsupported:
        raise UsageError(f"{study.name}: backend slurm does not support {', '.join(unsupported)} yet")
    renderer = prepared.renderer
    templates = [renderer.dir, bundled_templates()]
    if options.dry_run == "client":  # every attempt-0 script built: what would be submitted
        for trial in prepared.trials:
            build(study, renderer.render(trial, attempt=0), templates)
        progress = Progress(study=study.name, total=len(prepared.trials), waiting=len(prepared.trials),
                            dry_run="client")
        return progress
    throttle = Throttle(qps=study.throttle.qps if qps is None else qps,
                        burst=max(1, study.throttle.burst if burst is None else burst), concurrency=options.workers)
    loop = SlurmLoop(study, prepared.trials, renderer, slurm or Slurm(), throttle, options, reporter, policy)
    return loop.run()
