"""What each backend honours of a study, and the located problems of a study that asks its
backend for more (pure).

A backend runs a trial its own way: Kubernetes as a Volcano Job or a batch/v1 Job and its
PodGroup, Slurm as one sbatch job, YARN as one application of stratctl's gang AM. Slurm and
YARN take from an attempt's rendering only its command line, literal environment, CPUs,
memory and GPUs (core/task.py); a field they cannot honour would be dropped without a word,
a search they cannot run refused only by `submit`. `problems(study)` says each of them at
`validate` (and so at `plan`, `render` and `submit`, which load the study the same way),
located at the field: nothing is dropped silently, nothing is first refused at submit.

Two tables say it. `CAPABILITIES`, one `Capabilities` per backend, holds what is not one
field (the strategies, the resource names, a gang smaller than the trial, `submit`'s
options). A resource name a typo away from an accelerator's (core/accelerators.py) is said
here too, on every backend. `FIELDS`, one line per study field, says which backends honour it; `EVERYWHERE`
lists the fields every backend honours. A field added to the study models is judged by
adding it to one of them (tests/unit/test_capabilities.py fails until it is).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from stratctl.core.accelerators import misspelt, misspelt_message
from stratctl.core.quantity import GPU
from stratctl.errors import Problem, UsageError

VOLCANO, BATCH, SLURM, YARN = "kubernetes-volcano", "kubernetes-batch", "slurm", "yarn"
BACKENDS = (VOLCANO, BATCH, SLURM, YARN)
KUBERNETES = frozenset({VOLCANO, BATCH})


@dataclass(frozen=True)
class Capabilities:
    """What one backend honours beyond single fields (those are in `FIELDS`):

    | | kubernetes-volcano | kubernetes-batch | slurm | yarn |
    |---|---|---|---|---|
    | closed-loop strategies (tpe, gp, cmaes, nsga2) | yes | yes | no | no |
    | resources | any | any | cpu, memory, nvidia.com/gpu | cpu, memory, nvidia.com/gpu |
    | a gang smaller than the trial (`min_available`) | yes | yes | no | no |
    | environment values from the cluster (not literal) | yes | yes | no | no |
    | `submit --storage`, `--move-waiting`, `--dry-run=server`, `--prometheus-url` | yes | yes | no | no |
    | `submit --in-cluster` (the loop as a Job of one pod; on Slurm as a small batch job) | yes | yes | yes | no |
    | `queue`: a name or a list (queue fallback) | Volcano queues | Volcano queues | partitions (`-p a,b`) | moves |
    """

    name: str  # the backend as problems name it
    runs: str  # how it runs an attempt, said in each refusal
    closed_loop: bool  # strategies that choose trials from results
    resources: frozenset[str] | None  # resource names a trial may ask for; None: any
    partial_gang: bool  # pods outside the gang (min_available below a trial's or a task's pods)
    cluster_env: bool  # environment values the cluster fills in (not a literal string: core/task.py drops them)
    options: frozenset[str]  # of OPTIONS, the submit options it honours
    instead: Mapping[str, str] = field(default_factory=dict)  # a field (or option) it drops -> what to do instead
    # the backend's own option that `queue` stands for (both set: which one?), when it honours `queue`
    queue_option: str | None = None


OPTIONS = ("--storage", "--move-waiting", "--dry-run=server", "--prometheus-url", "--in-cluster")
_NODE = frozenset({"cpu", "memory", GPU})  # what an attempt's job asks of a node (core/task.py)

CAPABILITIES: dict[str, Capabilities] = {
    VOLCANO: Capabilities(
        VOLCANO,
        "each attempt is a Volcano Job",
        closed_loop=True,
        resources=None,
        partial_gang=True,
        cluster_env=True,
        options=frozenset(OPTIONS),
    ),
    BATCH: Capabilities(
        BATCH,
        "each attempt is a batch/v1 Job ganged by a Volcano PodGroup",
        closed_loop=True,
        resources=None,
        partial_gang=True,
        cluster_env=True,
        options=frozenset(OPTIONS),
    ),
    SLURM: Capabilities(
        SLURM,
        "each attempt is one sbatch job run on the nodes",
        closed_loop=True,
        resources=_NODE,
        partial_gang=False,
        cluster_env=False,
        options=frozenset({"--in-cluster", "--storage"}),
        instead={
            "priority_class": "use slurm.qos",
            "trial.node_selector": "use slurm.constraint (node features)",
            "trial.affinity": "use slurm.constraint (node features)",
            "trial.network_topology": 'use slurm.extra: ["--switches=1"]',
            "trial.template": "put a slurm-job.sh.j2 in templates_dir",
            "checkpoint.grace_seconds": "remove it (Slurm's GraceTime, its partition's or QOS's, decides)",
            "--move-waiting": (
                "a study listing several partitions asks for all of them at once: Slurm starts each job in "
                "whichever can start it first, nothing waits to be moved"
            ),
            "--dry-run=server": (
                "Slurm has no dry run of a submission that keeps nothing (`sbatch --test-only` only estimates a "
                "start time); --dry-run client builds every job script"
            ),
            "--prometheus-url": (
                "it reads etcd's and the Volcano scheduler's latencies, which a Slurm cluster has none of; "
                "the loop reads Slurm's own pressure from squeue and sinfo"
            ),
        },
        queue_option="slurm.partition",
    ),
    YARN: Capabilities(
        YARN,
        "each attempt is one YARN application run on the nodes",
        closed_loop=True,
        resources=_NODE,
        partial_gang=False,
        cluster_env=False,
        options=frozenset({"--storage"}),
        instead={
            "trial.node_selector": "use yarn.node_label",
            "trial.affinity": "use yarn.node_label",
            "trial.labels": "use yarn.tags",
            "trial.topology_spread_constraints": "use yarn.placement: spread",
            "trial.network_topology": "use yarn.placement: pack with placement_scope: rack",
            "trial.template": "put a yarn-task.sh.j2 in templates_dir",
            "retries.max_retry": "use yarn.max_app_attempts",
            "--move-waiting": (
                "a study listing several queues moves its waiting applications to the next queue without it"
            ),
            "--dry-run=server": (
                "the ResourceManager has no dry run of a submission; --dry-run client builds every application"
            ),
            "--prometheus-url": (
                "it reads etcd's and the Volcano scheduler's latencies, which a YARN cluster has none of; "
                "the loop reads YARN's own pressure from the ResourceManager"
            ),
            "--in-cluster": (
                "YARN runs a long-lived process only as an application with an application master of its own, "
                "and the submit loop is none: run submit on a machine that stays up"
            ),
        },
        queue_option="yarn.queue",
    ),
}


@dataclass(frozen=True)
class Field:
    """A study field a backend may not honour: its dotted path (`tasks.*`: every task's),
    what it asks for, and the backends that honour it."""

    path: str
    what: str
    honoured_by: frozenset[str]


# One line a field: a field that asks for something (a value, not its default) on a backend
# not listed here is a located problem (trial.tasks.*.min_available: see Capabilities.partial_gang;
# resources: Capabilities.resources).
FIELDS = (
    Field("namespace", "a Kubernetes namespace", KUBERNETES),
    # Slurm: the partitions, a list as one multi-partition submission (backends/slurm/script.py)
    # YARN: the queues, a waiting application moved on to the next past the bound (backends/batch/moves.py)
    Field("queue", "a Volcano queue", KUBERNETES | {SLURM, YARN}),
    Field("priority_class", "a Kubernetes PriorityClass", KUBERNETES),
    Field("workload", "a Kubernetes workload kind", KUBERNETES),
    Field("slurm", "Slurm's options", frozenset({SLURM})),
    Field("yarn", "YARN's options", frozenset({YARN})),
    Field("cleanup", "deleting finished jobs", KUBERNETES),
    Field("checkpoint.grace_seconds", "a grace period between SIGTERM and SIGKILL", KUBERNETES),
    Field("retries.max_retry", "Volcano's maxRetry (a Job's backoffLimit)", KUBERNETES),
    Field("throttle.aging", "packing trials of different shapes into free GPUs", KUBERNETES),
    Field("throttle.on_breaker", "the etcd breaker", KUBERNETES),
    Field("trial.image", "a container image", KUBERNETES),
    Field("trial.tasks.*.image", "a container image", KUBERNETES),
    Field("trial.restart_policy", "a pod restart policy", KUBERNETES),
    Field("trial.node_selector", "a node selector", KUBERNETES),
    Field("trial.tolerations", "tolerations", KUBERNETES),
    Field("trial.topology_spread_constraints", "topology spread constraints", KUBERNETES),
    Field("trial.annotations", "pod annotations", KUBERNETES),
    Field("trial.labels", "pod labels", KUBERNETES),
    Field("trial.service_account", "a service account", KUBERNETES),
    Field("trial.volumes", "pod volumes", KUBERNETES),
    Field("trial.volume_mounts", "volume mounts", KUBERNETES),
    Field("trial.tasks.*.volume_mounts", "volume mounts", KUBERNETES),
    Field("trial.affinity", "node affinity", KUBERNETES),
    Field("trial.image_pull_secrets", "image pull secrets", KUBERNETES),
    Field("trial.env_from", "environment from config maps and secrets", KUBERNETES),
    Field("trial.security_context", "a pod security context", KUBERNETES),
    Field("trial.network_topology", "a Volcano network topology (HyperNodes)", KUBERNETES),
    Field("trial.policies", "Volcano lifecycle policies", frozenset({VOLCANO})),
    Field("trial.tasks.*.node_selector", "a node selector", KUBERNETES),
    Field("trial.tasks.*.affinity", "node affinity", KUBERNETES),
    Field("trial.tasks.*.tolerations", "tolerations", KUBERNETES),
    Field("trial.tasks.*.policies", "Volcano lifecycle policies", frozenset({VOLCANO})),
    Field("trial.template", "a Kubernetes manifest template", KUBERNETES),
)

# Honoured by every backend (judged too: the README's table lists them).
EVERYWHERE = (
    "name",
    "backend",
    "space",
    "strategy.seed",
    "strategy.trials",
    "objective",
    "critical",
    "templates_dir",
    "merge",
    "checkpoint.location",
    "retries.max_failures",
    "retries.max_preemptions",
    "throttle.qps",
    "throttle.burst",
    "throttle.parallelism",
    "throttle.order",
    "throttle.yield_to_higher_priority",
    "cost",
    "trial.command",
    "trial.args",
    "trial.env",
    "trial.tasks.*.name",
    "trial.tasks.*.replicas",
    "trial.tasks.*.command",
    "trial.tasks.*.args",
    "trial.tasks.*.env",
)
# Judged in Capabilities: a closed-loop strategy (and so its pruner), resources, a partial gang.
JUDGED_APART = (
    "strategy.kind",
    "pruner",
    "trial.resources",
    "trial.tasks.*.resources",
    "trial.min_available",
    "trial.tasks.*.min_available",
    "trial.tasks",
)


EMPTY: tuple[Any, ...] = (None, "", [], {})


def backend_of(study: Any) -> str:
    """The capabilities' name of a study's backend (Kubernetes by its workload)."""
    if study.backend == "kubernetes":
        return VOLCANO if study.workload == "volcano" else BATCH
    return str(study.backend)


def of(study: Any) -> Capabilities:
    return CAPABILITIES[backend_of(study)]


def honours(backend: str, needs: str) -> bool:
    """Whether `backend` honours what a capability of the submit loop's cycle needs
    (run/cycle.py's `Capability.needs`): a study field of `FIELDS` or `EVERYWHERE`, a submit
    option, or `closed_loop`. What `validate` refuses on a backend is what its cycle lacks."""
    caps = CAPABILITIES[backend]
    if needs == "closed_loop":
        return caps.closed_loop
    if needs in OPTIONS:
        return needs in caps.options
    if needs in EVERYWHERE:
        return True
    entry = next((f for f in FIELDS if f.path == needs), None)
    if entry is None:
        raise KeyError(f"{needs!r}: neither a field, an option nor a capability of core/capabilities.py")
    return backend in entry.honoured_by


def problems(study: Any) -> list[Problem]:
    """Every field of `study` its backend would drop or refuse, located in its file
    (`study.problem`: the document's positions, as every other check after loading)."""
    caps = of(study)
    found: list[Problem] = []

    def say(path: tuple[Any, ...], message: str) -> None:
        found.append(study.problem(path, f"{'.'.join(map(str, path))}: {message}"))

    if study.strategy.closed_loop and not caps.closed_loop:
        say(
            ("strategy", "kind"),
            f"backend {caps.name} cannot run strategy {study.strategy.kind!r}, which chooses "
            f"trials from results ({caps.runs}; only strategies whose trials are known up front run there: "
            "grid, random, quasi-random); use one of those, or backend kubernetes",
        )
    for entry in FIELDS:
        if caps.name in entry.honoured_by:
            continue
        for path, _value in _set(study, entry.path):
            hint = caps.instead.get(entry.path) or caps.instead.get(entry.path.replace("tasks.*.", ""))
            say(
                path,
                f"backend {caps.name} cannot honour {entry.what} ({caps.runs}): it would be dropped; "
                + (hint or "remove it")
                + _where(entry.honoured_by),
            )
    if caps.queue_option and study.queue != "default" and any(_set(study, caps.queue_option)):
        say(
            ("queue",),
            f"{caps.queue_option} says it too: on backend {caps.name} queue is {caps.queue_option} "
            f"(a list of them: each trial starts in the first that can run it); keep one of the two",
        )
    slips = {}  # resource names a typo away from an accelerator's: said as such, on every backend
    for path, name in _resources(study):
        meant = misspelt(name)
        if meant:
            slips[name] = meant
            say(path, misspelt_message(name, meant))
    if caps.resources is not None:
        for path, name in _resources(study):
            if name not in caps.resources and name not in slips:
                say(
                    path,
                    f"backend {caps.name} cannot give a trial {name} ({caps.runs}, asking the nodes for "
                    f"{', '.join(sorted(caps.resources))} only): it would be dropped; remove it" + _where(KUBERNETES),
                )
    if not caps.partial_gang:
        for path, message in _partial_gangs(study):
            say(
                path,
                f"backend {caps.name} starts every process of a trial together ({caps.runs}): {message}; "
                "remove min_available" + _where(KUBERNETES),
            )
    if not caps.cluster_env:
        for path, name in _cluster_env(study):
            say(
                path,
                f"backend {caps.name} cannot give {name} a value from the cluster ({caps.runs}, its "
                "environment literal strings only): it would be dropped; give a value" + _where(KUBERNETES),
            )
    return found


def refuse_options(study: Any, given: Iterable[str]) -> None:
    """Refuse `submit` options (of OPTIONS) the study's backend cannot honour, before
    anything is rendered or sent."""
    caps = of(study)
    unsupported = [option for option in given if option in OPTIONS and option not in caps.options]
    if unsupported:
        why = caps.instead.get(unsupported[0], caps.runs) if len(unsupported) == 1 else caps.runs
        raise UsageError(
            f"{', '.join(unsupported)}: backend {caps.name} does not support "
            f"{'this option' if len(unsupported) == 1 else 'these options'} ({why}); "
            f"nothing was submitted"
        )


def _where(backends: frozenset[str]) -> str:
    if backends == KUBERNETES:
        return ", or use backend kubernetes"
    if backends == {VOLCANO}:
        return ", or use backend kubernetes with workload volcano"
    return ""


def _set(model: Any, dotted: str) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of each field at `dotted` whose value asks for something: not its
    default, and not empty (`tolerations: []` asks for none)."""
    yield from _walk(model, dotted.split("."), ())


def _walk(node: Any, parts: list[str], path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    name, rest = parts[0], parts[1:]
    if name == "*":
        for i, item in enumerate(node):
            yield from _walk(item, rest, path + (i,)) if rest else iter(())
        return
    if not isinstance(node, BaseModel) or name not in type(node).model_fields:
        return  # a field this model does not have (yet): nothing to judge
    value = getattr(node, name)
    if rest:
        yield from _walk(value, rest, path + (name,))
    elif value != type(node).model_fields[name].get_default(call_default_factory=True) and value not in EMPTY:
        yield path + (name,), value


def _resources(study: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, name) of each resource the study asks for, once per resources block."""
    blocks: list[tuple[tuple[Any, ...], Any]] = [(("trial", "resources"), study.trial.resources)]
    blocks += [
        (("trial", "tasks", i, "resources"), t.resources)
        for i, t in enumerate(study.trial.tasks)
        if t.resources is not None
    ]
    for where, res in blocks:
        seen: set[str] = set()
        for kind in ("requests", "limits"):
            for name in getattr(res, kind):
                if name not in seen:
                    seen.add(name)
                    yield where + (kind, name), name


def _cluster_env(study: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, name) of each environment variable whose value is not a literal string."""
    blocks: list[tuple[tuple[Any, ...], Any]] = [(("trial", "env"), study.trial.env)]
    blocks += [(("trial", "tasks", i, "env"), t.env) for i, t in enumerate(study.trial.tasks)]
    for where, env in blocks:
        for name, value in env.items():
            if not isinstance(value, str):
                yield where + (name,), name


def _partial_gangs(study: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    pods = [t.replicas for t in study.trial.tasks]
    if study.trial.min_available is not None and not (
        all(isinstance(p, int) for p in pods) and study.trial.min_available >= sum(pods)
    ):
        yield ("trial", "min_available"), "a gang of min_available pods, fewer than the trial's, cannot be asked for"
    for i, task in enumerate(study.trial.tasks):
        if task.min_available is not None and task.min_available != task.replicas:
            yield (
                ("trial", "tasks", i, "min_available"),
                f"task {task.name!r} with min_available {task.min_available}, not all of its replicas, "
                "cannot be asked for",
            )
