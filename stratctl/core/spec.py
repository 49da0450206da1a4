"""The study: what a user writes in a study file, validated as a whole.

`load_study(path)` reads the YAML with positions (document.py), validates it with the
pydantic models below (the search space's are in distributions.py), checks every template
string statically (sandbox.py), and raises one StudyError listing every problem as
`FILE:LINE:COL: message`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from stratctl.core import capabilities, document, sandbox, wording
from stratctl.core.digest import digest
from stratctl.core.distributions import (  # noqa: F401 - part of the study's public surface
    SINGLE_OBJECTIVE,
    Choice,
    IntRange,
    LogUniform,
    Objective,
    Param,
    Pruner,
    Strategy,
    Uniform,
    grid_size,
    in_grid,
    missing,
)
from stratctl.core.model import Model as _Model
from stratctl.core.model import dns_label, parse_duration
from stratctl.core.model import invalid as _bad
from stratctl.core.pod import Affinity, EnvFrom, SecurityContext, Volume, VolumeMount, undefined_mounts
from stratctl.core.quantity import GPU, gpus_of
from stratctl.core.topology import NetworkTopology
from stratctl.errors import Problem, StudyError

# Trial names are `<study>-<10 hex>` plus `-aNNN` for re-submissions; Volcano then appends
# `-<task>-<index>` for pod names, which must stay within a 63-character hostname.
MAX_NAME = 40
_PARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

# ---------------------------------------------------------------- the trial template

Quantity = int | float | str


def _extended(name: str) -> bool:
    """An extended resource: a domain-qualified name outside kubernetes.io, or hugepages."""
    if name.startswith("hugepages-"):
        return True
    domain = name.split("/", 1)[0] if "/" in name else ""
    return bool(domain) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


class Resources(_Model):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}

    def gpus(self) -> int:
        return gpus_of({"requests": self.requests, "limits": self.limits})

    @model_validator(mode="before")
    @classmethod
    def _extended_limits(cls, data: Any) -> Any:
        """Extended resources (nvidia.com/gpu, ...) cannot be overcommitted: Kubernetes
        refuses a pod that requests one without the same limit, which only shows when the
        job controller creates pods. Fill the limit from the request."""
        if isinstance(data, dict) and isinstance(data.get("requests"), dict):
            given = data.get("limits")
            limits: dict[str, Any] = given if isinstance(given, dict) else {}
            missing = {k: v for k, v in data["requests"].items() if _extended(k) and k not in limits}
            if missing and (isinstance(data.get("limits"), dict) or data.get("limits") is None):
                data = {**data, "limits": {**limits, **missing}}
        return data

    @model_validator(mode="after")
    def _extended_equal(self) -> Self:
        for key, value in self.requests.items():
            if _extended(key) and key in self.limits and str(self.limits[key]) != str(value):
                raise _bad(
                    "extended",
                    "{key} cannot be overcommitted: its limit ({l}) must equal its request ({r})",
                    field="limits",
                    key=key,
                    l=self.limits[key],
                    r=value,
                )
        return self

    @field_validator("limits", "requests")
    @classmethod
    def _gpu_whole(cls, values: dict[str, Quantity]) -> dict[str, Quantity]:
        gpu = values.get(GPU)
        if isinstance(gpu, str) and sandbox.is_template(gpu):
            return values  # a trial-shape template: checked per trial (core/shape.py)
        if gpu is not None:
            try:
                ok = float(gpu) >= 0 and float(gpu) == int(float(gpu))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise _bad("gpu", "{gpu} must be a whole number (got {v!r})", gpu=GPU, v=gpu)
        return values


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None


class Policy(_Model):
    """A Volcano lifecycle policy: on an event (or a container exit code) take an action."""

    event: (
        Literal[
            "PodEvicted",
            "PodFailed",
            "TaskCompleted",
            "TaskFailed",
            "Unknown",
            "OutOfSync",
            "CommandIssued",
            "JobUpdated",
            "*",
        ]
        | None
    ) = None
    exit_code: int | None = None
    action: Literal[
        "AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob", "ResumeJob", "SyncJob"
    ]

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.event is None) == (self.exit_code is None):
            raise _bad("policy", "a policy needs exactly one of 'event' or 'exit_code'")
        return self


# Events Volcano raises for a job, never for one of its tasks (a task-level policy on them never fires).
JOB_EVENTS = ("CommandIssued", "JobUpdated")

DEFAULT_POLICIES = (
    # Preemption and eviction restart the whole gang (a partial gang is useless); the
    # trial resumes from its checkpoint. A failed pod fails the attempt: submit decides
    # whether to retry it as a new attempt (retries.max_failures).
    Policy(event="PodEvicted", action="RestartJob"),
    Policy(event="PodFailed", action="AbortJob"),
)


def _env(value: Any) -> Any:
    # Kubernetes env values are strings; YAML makes `1`, `true` and `0.5` into numbers.
    if isinstance(value, dict):
        return {
            k: ("true" if v is True else "false" if v is False else str(v)) if isinstance(v, int | float) else v
            for k, v in value.items()
        }
    return value


def _own_env(values: dict[str, str]) -> dict[str, str]:
    for name in values:
        if name.startswith("STRATCTL_"):
            raise _bad("reserved_env", "{name!r}: STRATCTL_* variables are set by stratctl", name=name)
    return values


EnvMap = Annotated[dict[str, str], Field(default_factory=dict), AfterValidator(_own_env)]


MAX_REPLICAS = 10_000


def _count(value: Any) -> Any:
    """A task's replicas: a whole number, or a template over the trial's values (the trial's
    shape then varies, core/shape.py renders and checks it per trial)."""
    if isinstance(value, str) and sandbox.is_template(value):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(
            "replicas",
            "must be a whole number, or a template over the trial's values "
            '(e.g. "{{{{ params.workers }}}}"), got {v!r}',
            v=value,
        )
    if value < 1:
        raise _bad("replicas", "must be at least 1")
    if value > MAX_REPLICAS:
        raise _bad("replicas", "must be at most {m}", m=MAX_REPLICAS)
    return value


class Task(_Model):
    """A role in the gang (workers, parameter servers, evaluators): replicas of one pod."""

    name: str
    replicas: Annotated[int | str, BeforeValidator(_count)] = 1
    min_available: int | None = Field(default=None, ge=0)
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: EnvMap
    resources: Resources | None = None
    volume_mounts: list[VolumeMount] = []  # added to trial.volume_mounts for this task's pods
    # Where this task's pods run, over the trial's: node_selector adds to trial.node_selector
    # (its keys win); affinity and tolerations replace the trial's (`tolerations: []`: none)
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    # Volcano task-level policies: for this task's events, decided before the trial's
    # (`{event: TaskCompleted, action: CompleteJob}` on the workers ends a trial whose ps never exit)
    policies: list[Policy] = []

    _env = field_validator("env", "node_selector", mode="before")(classmethod(lambda cls, v: _env(v)))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns_label(v, "task name", 20)

    @field_validator("policies")
    @classmethod
    def _task_events(cls, policies: list[Policy]) -> list[Policy]:
        for i, p in enumerate(policies):
            if p.event in JOB_EVENTS:
                raise _bad(
                    "policy",
                    "event {event!r} concerns the whole job, never one task's pods: give it in trial.policies",
                    field=f"{i}.event",
                    event=p.event,
                )
        return policies

    @model_validator(mode="after")
    def _min(self) -> Self:
        if isinstance(self.replicas, int) and self.min_available is not None and self.min_available > self.replicas:
            raise _bad(
                "min_available",
                "min_available ({m}) exceeds replicas ({r})",
                field="min_available",
                m=self.min_available,
                r=self.replicas,
            )
        return self

    @property
    def pods(self) -> int:
        """`replicas` as a whole number: a template is resolved for each trial first (core/shape.py)."""
        if not isinstance(self.replicas, int):
            raise TypeError(f"task {self.name}: replicas {self.replicas!r} is a template, resolved per trial")
        return self.replicas

    @property
    def gang(self) -> int:
        return self.pods if self.min_available is None else self.min_available


class TrialSpec(_Model):
    """What every trial runs; string fields are templates over the trial's variables."""

    image: str | None = None
    command: list[str] | None = None
    args: list[str] = []
    env: EnvMap
    resources: Resources = Resources()
    restart_policy: Literal["Never", "OnFailure"] = "Never"
    tasks: list[Task] = Field(default_factory=lambda: [Task.model_validate({"name": "worker"})], min_length=1)
    min_available: int | None = Field(default=None, ge=1)
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    topology_spread_constraints: list[dict[str, Any]] = []
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    service_account: str | None = None
    volumes: list[Volume] = []
    volume_mounts: list[VolumeMount] = []  # mounted in every task's container
    affinity: Affinity | None = None
    image_pull_secrets: list[str] = []
    env_from: list[EnvFrom] = []
    security_context: SecurityContext | None = None
    network_topology: NetworkTopology | None = None  # one Volcano HyperNode per gang
    policies: list[Policy] | None = None
    template: str | None = None  # a file in the templates directory

    _env = field_validator("env", "annotations", "labels", "node_selector", mode="before")(
        classmethod(lambda cls, v: _env(v))
    )

    @field_validator("template")
    @classmethod
    def _inside(cls, v: str | None) -> str | None:
        if v is not None:
            p = PurePosixPath(v.replace("\\", "/"))
            if p.is_absolute() or ".." in p.parts or not p.parts:
                raise _bad("template_path", "template path {v!r} escapes the templates directory", v=v)
        return v

    @field_validator("annotations", "labels")
    @classmethod
    def _reserved(cls, values: dict[str, str]) -> dict[str, str]:
        for key in values:
            if key.split("/")[0] == "stratctl.io":
                raise _bad("reserved", "{key!r}: keys under stratctl.io/ are set by stratctl", key=key)
        return values

    @model_validator(mode="after")
    def _tasks(self, info: ValidationInfo) -> Self:
        names = [t.name for t in self.tasks]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise _bad("task_name", "duplicate task name {name!r}", field=f"tasks.{i}.name", name=name)
        on_slurm = (info.context or {}).get("backend") in ("slurm", "yarn")  # a batch task runs on the node, no image
        for i, t in enumerate(self.tasks):
            if (t.image or self.image) is None and not on_slurm:
                raise _bad(
                    "image",
                    "task {name!r} has no image (set trial.image or the task's image)",
                    field=f"tasks.{i}",
                    name=t.name,
                )
        volumes = [v.name for v in self.volumes]
        for i, name in enumerate(volumes):
            if name in volumes[:i]:
                raise _bad("volume_name", "duplicate volume name {name!r}", field=f"volumes.{i}.name", name=name)
        for where, mounts in [
            ("volume_mounts", self.volume_mounts),
            *((f"tasks.{i}.volume_mounts", t.volume_mounts) for i, t in enumerate(self.tasks)),
        ]:
            missing = undefined_mounts(mounts, set(volumes), where)
            if missing:
                raise _bad(
                    "volume_mount",
                    "mount of volume {name!r}, which trial.volumes does not define",
                    field=missing[0],
                    name=missing[1],
                )
        total = sum(t.replicas for t in self.tasks if isinstance(t.replicas, int))
        templated = any(not isinstance(t.replicas, int) for t in self.tasks)
        if self.min_available is not None and self.min_available > total and not templated:
            raise _bad(
                "min_available",
                "min_available ({m}) exceeds the {n} pods of a trial",
                field="min_available",
                m=self.min_available,
                n=total,
            )
        return self

    @property
    def effective_policies(self) -> tuple[Policy, ...]:
        return DEFAULT_POLICIES if self.policies is None else tuple(self.policies)


# ---------------------------------------------------------------- operations


class Checkpoint(_Model):
    location: str = ""  # template, e.g. "s3://bucket/{{ study }}/{{ trial }}"
    # seconds between SIGTERM and SIGKILL for a trial's pods (terminationGracePeriodSeconds):
    # the time a preempted trial has to save (stratctl.trial.on_preempt); None: Kubernetes' 30 s
    grace_seconds: int | None = Field(default=None, ge=0)


class Retries(_Model):
    max_failures: int = Field(default=2, ge=0)  # failures retried as new attempts; the next one gives the trial up
    max_preemptions: int = Field(default=10, ge=0)  # preemptions resumed before the trial is given up
    max_retry: int = Field(default=3, ge=0)  # Volcano maxRetry of each job


class Parallelism(_Model):
    min: int = Field(default=1, ge=1)
    initial: int = Field(default=4, ge=1)
    max: int = Field(default=32, ge=1)

    @model_validator(mode="after")
    def _order(self) -> Self:
        if not self.min <= self.initial <= self.max:
            raise _bad(
                "order",
                "need min <= initial <= max (got {a}, {b}, {c})",
                field="initial",
                a=self.min,
                b=self.initial,
                c=self.max,
            )
        return self


def _duration(value: float | str) -> float | str:
    """A duration field: seconds, or "2h", "90m", "1h30m"."""
    try:
        parse_duration(value)
    except ValueError as e:
        raise _bad("duration", str(e)) from None
    return value


class Throttle(_Model):
    qps: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    burst: int = Field(default=10, ge=1)
    parallelism: Parallelism = Parallelism()
    # Which waiting trial goes first: the longest expected (cost.expected_duration as a
    # template over params) or the order the strategy lists them in.
    order: Literal["longest-first", "listed"] = "longest-first"
    # Admit nothing new while a gang of higher priority waits for GPUs it could have if
    # lower-priority work stepped aside: without it, trials refill every GPU that frees
    # and starve the production job Volcano cannot place.
    yield_to_higher_priority: bool = True
    # When trials differ in shape: a trial passed over by others for this long is admitted
    # before any other, so large trials are never starved (run/packing.py). Seconds or "5m".
    aging: float | str = "5m"

    _aging = field_validator("aging")(classmethod(lambda cls, v: _duration(v)))

    @property
    def aging_seconds(self) -> float:
        return parse_duration(self.aging)

    # What the etcd-latency breaker does: hold new trials, or also drain the running ones
    # until it clears (backends/kubernetes/shedding.py; critical studies only ever hold).
    on_breaker: Literal["hold", "drain"] = "hold"


class Cost(_Model):
    # seconds, or "2h", "90m", "1h30m"; or a template over the trial's values that renders
    # one, such as "{{ params.epochs * 6 }}m", when trials differ in length
    expected_duration: float | str = "1h"
    gpu_hour_price: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    retry_factor: float = Field(default=1.0, ge=1.0, le=100, allow_inf_nan=False)
    currency: str = "USD"

    @field_validator("expected_duration")
    @classmethod
    def _duration(cls, v: float | str) -> float | str:
        if isinstance(v, str) and sandbox.is_template(v):
            return v  # checked and rendered per trial by the renderer
        return _duration(v)

    @property
    def per_trial(self) -> bool:
        """Whether the expected duration is a template, different for each trial."""
        return isinstance(self.expected_duration, str) and sandbox.is_template(self.expected_duration)

    @property
    def expected_seconds(self) -> float:
        """The expected duration of every trial (not defined when it is `per_trial`)."""
        if self.per_trial:
            raise ValueError("cost.expected_duration is a template: see Renderer.expected_seconds")
        return parse_duration(self.expected_duration)


class Slurm(_Model):
    """Where and how a study's attempts run on a Slurm cluster (`backend: slurm`).

    Every value becomes an `#SBATCH` option of each attempt's script (templates/
    slurm-job.sh.j2): one line each, so no value may hold a line break."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: float | str = "1h"  # sbatch --time, rounded up to whole minutes
    constraint: str | None = None
    gres: str = "gpu"  # the study's GPUs: `gpu`, or `gpu:a100` for a type (--gpus-per-task=a100:<count>)
    output_dir: str = "stratctl-out"  # each attempt writes <output_dir>/<study>/<trial>/ (its log and result)
    extra: list[str] = []  # further sbatch options, e.g. ["--exclusive"]

    @field_validator("partition", "account", "qos", "constraint", "gres", "output_dir")
    @classmethod
    def _one_line(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (not v.strip() or any(c in v for c in "\n\r\0") or v != v.strip()):
            raise _bad(
                "slurm", "slurm.{field} must be one non-empty line without surrounding spaces", field=info.field_name
            )
        return v

    @field_validator("time_limit")
    @classmethod
    def _limit(cls, v: float | str) -> float | str:
        return _duration(v)

    @field_validator("extra")
    @classmethod
    def _options(cls, v: list[str]) -> list[str]:
        for i, option in enumerate(v):
            if not option.startswith("--") or any(c in option for c in "\n\r\0"):
                raise _bad(
                    "slurm",
                    "slurm.extra {i}: expected one sbatch option starting with '--', got {got!r}",
                    field=str(i),
                    i=i,
                    got=option,
                )
        return v

    @property
    def minutes(self) -> int:
        return max(1, -(-int(parse_duration(self.time_limit)) // 60))


class Yarn(_Model):
    """Where and how a study's attempts run on a Hadoop YARN cluster (`backend: yarn`).

    One attempt is one YARN application, submitted through the ResourceManager's REST API
    (stratctl/backends/yarn/): its application master is stratctl's gang AM (yarn-am/), which asks
    for the attempt's N containers and starts the trial's command in all of them once all
    N are allocated, never in fewer."""

    # the ResourceManager's web address; several for an HA pair (a standby's answers move on to the next)
    resource_managers: list[str] = Field(default=["http://localhost:8088"], min_length=1)
    queue: str = "default"
    node_label: str | None = None  # a node label expression for the attempts' containers
    application_type: str = "STRATCTL"
    tags: list[str] = []  # more application tags (stratctl adds its own, by which it finds its applications)
    max_app_attempts: int = Field(default=2, ge=1)  # the RM restarts a lost AM this often, within one attempt
    placement: Literal["any", "spread", "pack"] = "any"  # a gang's containers: anywhere, apart, together
    placement_scope: Literal["node", "rack"] = "node"  # apart or together on what: a node, a rack
    gang_timeout: float | str | None = None  # a gang not whole in this long gives back what it holds and asks again
    am_jar: str | None = None  # the gang AM's jar, on a file system every NodeManager reads (default: the built one)
    am_memory_mb: int = Field(default=256, ge=64)
    classpath: list[str] | None = None  # the AM's Hadoop classpath (default: the RM's yarn.application.classpath)
    user: str | None = None  # user.name of each REST request (simple authentication)
    output_dir: str = (
        "stratctl-out"  # each attempt writes <output_dir>/<study>/<trial>/ (its result), shared by the nodes
    )

    @field_validator("resource_managers")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for i, url in enumerate(v):
            if not re.fullmatch(r"https?://[^\s/]+/?", url):
                raise _bad(
                    "yarn",
                    "yarn.resource_managers {i}: expected a ResourceManager's web address such as "
                    "http://rm1:8088, got {got!r}",
                    field=str(i),
                    i=i,
                    got=url,
                )
        return [url.rstrip("/") for url in v]

    @field_validator("queue", "node_label", "application_type", "am_jar", "user", "output_dir")
    @classmethod
    def _one_line(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (not v.strip() or any(c in v for c in "\n\r\0") or v != v.strip()):
            raise _bad(
                "yarn", "yarn.{field} must be one non-empty line without surrounding spaces", field=info.field_name
            )
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        for i, tag in enumerate(v):
            if not tag or len(tag) > 100 or not tag.isascii() or any(c in tag for c in ",\n\r\0"):
                raise _bad(
                    "yarn",
                    "yarn.tags {i}: a YARN application tag is 1-100 ASCII characters without a comma, got {got!r}",
                    field=str(i),
                    i=i,
                    got=tag,
                )
            if tag.lower().startswith("stratctl"):
                raise _bad(
                    "reserved", "yarn.tags {i}: tags starting with 'stratctl' are set by stratctl", field=str(i), i=i
                )
        return v

    @field_validator("gang_timeout")
    @classmethod
    def _timeout(cls, v: float | str | None) -> float | str | None:
        return None if v is None else _duration(v)

    @property
    def gang_timeout_seconds(self) -> float:
        """0 when the gang waits as long as it takes."""
        return 0.0 if self.gang_timeout is None else parse_duration(self.gang_timeout)


# ---------------------------------------------------------------- the study


class Study(_Model):
    """A whole study file."""

    name: str
    namespace: str = "default"
    # a queue name, or the queues to try in order (see `queues`, run/queues.py)
    queue: str | list[str] = "default"
    priority_class: str | None = None
    critical: bool = False
    workload: Literal["volcano", "batch"] = "volcano"
    # where the attempts run: Kubernetes with Volcano (the default), a Slurm or a YARN cluster
    backend: Literal["kubernetes", "slurm", "yarn"] = "kubernetes"
    slurm: Slurm = Slurm()
    yarn: Yarn = Yarn()
    space: dict[str, Param] = Field(min_length=1)
    strategy: Strategy
    # what the search optimises (a list for several): closed-loop strategies need it;
    # `status --best` sorts by it
    objective: Objective | list[Objective] | None = None
    # stops trials early from the intermediate values they report (`stratctl report`)
    pruner: Pruner | None = None
    trial: TrialSpec
    checkpoint: Checkpoint = Checkpoint()
    retries: Retries = Retries()
    throttle: Throttle = Throttle()
    cost: Cost = Cost()
    cleanup: Literal["keep", "delete"] = "keep"
    templates_dir: str | None = None

    _source: Path | None = PrivateAttr(default=None)
    _doc: document.Document | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return dns_label(v, "study name", MAX_NAME)

    @field_validator("namespace")
    @classmethod
    def _label(cls, v: str, info: ValidationInfo) -> str:
        return dns_label(v, info.field_name or "namespace")

    @field_validator("queue", mode="before")
    @classmethod
    def _queue(cls, v: Any) -> Any:
        """A queue name, or a non-empty list of distinct ones (the order is the preference)."""
        if isinstance(v, str):
            return dns_label(v, "queue")
        if not isinstance(v, list) or not v:
            raise _bad("queue", "queue must be a queue name or a non-empty list of queue names")
        seen: set[str] = set()
        for i, name in enumerate(v):
            if not isinstance(name, str):
                raise _bad("queue", "queue {i}: expected a queue name, got {got!r}", field=str(i), i=i, got=name)
            try:
                dns_label(name, "queue")
            except PydanticCustomError as e:  # the same error, located at the entry
                raise _bad(e.type, e.message(), field=str(i)) from None
            if name in seen:
                raise _bad("queue", "queue {name!r} is listed twice", field=str(i), name=name)
            seen.add(name)
        return v

    @field_validator("space")
    @classmethod
    def _params(cls, space: dict[str, Any]) -> dict[str, Any]:
        for name in space:
            if not _PARAM_NAME.match(name):
                raise _bad(
                    "param_name",
                    "parameter name {name!r} must be a letter then letters, digits or '_'",
                    field=name,
                    name=name,
                )
            if hasattr(dict, name):  # in Jinja, params.items would be the dict method, not the parameter
                raise _bad(
                    "param_name",
                    "parameter name {name!r} is reserved (templates would read params.{name} "
                    "as a method of the parameters mapping); rename it",
                    field=name,
                    name=name,
                )
        return space

    @field_validator("objective", mode="before")
    @classmethod
    def _objectives(cls, v: Any) -> Any:
        """One objective or a non-empty list of them, each error located at its own field."""
        if v is None:
            return None
        many = isinstance(v, list)
        if many and not v or not many and not isinstance(v, dict):
            raise _bad("objective", "give a metric ({metric: loss, direction: minimize}) or a non-empty list of them")
        out, seen = [], set()
        for i, item in enumerate(v if many else [v]):
            at = f"{i}." if many else ""
            if not isinstance(item, dict):
                raise _bad(
                    "objective",
                    "expected a mapping like {{metric: loss, direction: minimize}}, got {got!r}",
                    field=at.rstrip(".") or None,
                    got=item,
                )
            try:
                objective = Objective.model_validate(item)
            except ValidationError as e:
                first = e.errors()[0]
                where = at + ".".join(str(part) for part in first["loc"])
                raise _bad("objective", wording.plain(first), field=where.rstrip(".") or None) from None
            if objective.metric in seen:
                raise _bad("objective", "metric {m!r} is listed twice", field=f"{at}metric", m=objective.metric)
            seen.add(objective.metric)
            out.append(objective)
        return out if many else out[0]

    @property
    def objectives(self) -> list[Objective]:
        """The objectives, as a list (empty when the study names none)."""
        if self.objective is None:
            return []
        return list(self.objective) if isinstance(self.objective, list) else [self.objective]

    @model_validator(mode="after")
    def _whole(self) -> Self:
        self._check_search()
        self._check_workload()
        return self

    def _check_search(self) -> None:
        """The strategy, objective, pruner and space agree: a closed-loop search has its
        objective and chooses every value itself; a grid has points for every parameter."""
        kind = self.strategy.kind
        if self.strategy.closed_loop:
            if self.objective is None:
                raise _bad(
                    "objective",
                    "strategy {kind!r} chooses trials from results: it needs 'objective' "
                    "(e.g. objective: {{metric: loss, direction: minimize}})",
                    field="strategy.kind",
                    kind=kind,
                )
            needs = missing(kind)
            if needs:
                raise _bad("strategy_needs", needs, field="strategy.kind")
            if kind in SINGLE_OBJECTIVE and len(self.objectives) > 1:
                raise _bad(
                    "objective",
                    "strategy {kind!r} optimises one objective; {n} are given (use tpe or nsga2 for several)",
                    field="objective",
                    kind=kind,
                    n=len(self.objectives),
                )
            if self.pruner is not None and len(self.objectives) > 1:
                raise _bad(
                    "pruner",
                    "a pruner judges one objective's intermediate values; {n} objectives are given",
                    field="pruner",
                    n=len(self.objectives),
                )
            for name, p in self.space.items():
                if p.grid:
                    raise _bad(
                        "grid",
                        "strategy {kind!r} chooses every value of {name!r} itself: remove 'grid'",
                        field=f"space.{name}.grid",
                        kind=kind,
                        name=name,
                    )
        if self.pruner is not None and not self.strategy.closed_loop:
            raise _bad(
                "pruner",
                "a pruner stops trials of a closed-loop search: use strategy kind tpe, gp, cmaes or "
                "nsga2 (got {kind!r})",
                field="pruner",
                kind=kind,
            )
        if self.strategy.kind == "grid":
            for name, p in self.space.items():
                if not isinstance(p, Choice | IntRange) and not p.grid:
                    raise _bad(
                        "grid",
                        "the grid strategy needs 'grid: N' points for continuous parameter {name!r}",
                        field=f"space.{name}",
                        name=name,
                    )

    def _check_workload(self) -> None:
        """The trial can run as the backend and workload run it: a command on Slurm and YARN,
        one task and restart_policy Never for a batch/v1 Job."""
        if self.backend in ("slurm", "yarn"):
            # several tasks: YARN's gang AM asks for containers of each task's own size, Slurm runs a
            # heterogeneous job of one component a task
            for i, t in enumerate(self.trial.tasks):
                if not (t.command or self.trial.command):
                    one = len(self.trial.tasks) == 1
                    raise _bad(
                        "batch_command",
                        "backend {backend} runs trial.command on the nodes (there is no image "
                        "entrypoint): set trial.command{task}",
                        field="trial" if one else f"trial.tasks.{i}",
                        backend=self.backend,
                        task="" if one else f" or the command of task {t.name!r}",
                    )
        if self.workload == "batch" and len(self.trial.tasks) != 1:
            raise _bad(
                "batch_tasks", "workload 'batch' runs one pod template: exactly one task allowed", field="trial.tasks"
            )
        if (
            self.workload == "batch"
            and self.trial.restart_policy != "Never"
            and self.trial.template is None
            and self.templates_dir is None
        ):
            # the bundled batch template ends an attempt whose pod was preempted with a pod
            # failure policy, which the API server accepts only with restartPolicy Never
            raise _bad(
                "batch_restart_policy",
                "workload 'batch' needs restart_policy Never (its Job fails when a pod "
                "is preempted, so the trial resumes as its next attempt: a podFailurePolicy, which Kubernetes "
                "allows only with restartPolicy Never); got {policy!r}",
                field="trial.restart_policy",
                policy=self.trial.restart_policy,
            )

    @property
    def source(self) -> Path | None:
        """The study file this was loaded from."""
        return self._source

    @property
    def file(self) -> str:
        """How problems name the study file: its path, `<stdin>`, or `<study>` when built in code."""
        if self._doc is not None:
            return self._doc.file
        return str(self._source or "<study>")

    @property
    def text(self) -> str:
        """The study file as read (what the study's record in the cluster keeps)."""
        if self._doc is not None and self._doc.text is not None:
            return self._doc.text
        return self._source.read_text() if self._source else ""

    def problem(self, path: tuple[Any, ...], message: str) -> Problem:
        """A problem located at a field of the study file (for checks made after loading)."""
        if self._doc is not None:
            return self._doc.problem(path, message)
        return Problem(self.file, None, None, message)

    def with_namespace(self, namespace: str) -> Study:
        """The same study in another namespace (`submit -n`), still read from the same file."""
        # only the fields the file set: a full dump would mark every default as set (e.g.
        # cost.expected_duration, which then stamps every job with the default duration)
        study = Study.model_validate(
            {**self.model_dump(exclude_unset=True), "namespace": namespace}, context={"backend": self.backend}
        )
        study._source, study._doc = self._source, self._doc
        return study

    def path_of(self, text: str) -> tuple[Any, ...] | None:
        """Where the study file writes the template string `text` (its first occurrence)."""
        if self._doc is None:
            return None
        return next((path for path, value in _strings(self._doc.data, ()) if value == text), None)

    @property
    def templates_path(self) -> Path | None:
        """The user templates directory, resolved relative to the study file."""
        if self.templates_dir is None:
            return None
        base = self._source.parent if self._source else Path.cwd()
        return (base / self.templates_dir).resolve()

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues trials may go to, in order of preference (one, for `queue: NAME`)."""
        return (self.queue,) if isinstance(self.queue, str) else tuple(self.queue)

    @property
    def home_queue(self) -> str:
        """The first queue: where trials go while it has room, and what manifests render."""
        return self.queues[0]

    def task_resources(self, task: Task) -> Resources:
        return task.resources or self.trial.resources

    @property
    def varying_shape(self) -> bool:
        """Whether trials differ in gang size or GPUs: replicas or the GPU request is a
        template over the trial's values (core/shape.py resolves it per trial)."""
        return any(
            isinstance(t.replicas, str)
            or isinstance(request := self.task_resources(t).requests.get(GPU), str)
            and sandbox.is_template(request)
            or isinstance(limit := self.task_resources(t).limits.get(GPU), str)
            and sandbox.is_template(limit)
            for t in self.trial.tasks
        )

    @property
    def gpus_per_trial(self) -> int:
        """GPUs of one trial (of a study whose trials all have the same shape)."""
        return sum(t.pods * self.task_resources(t).gpus() for t in self.trial.tasks)

    @property
    def gang_size(self) -> int:
        """Pods that must start together (Volcano minAvailable)."""
        return self.trial.min_available or sum(t.gang for t in self.trial.tasks) or 1

    @cached_property
    def spec_hash(self) -> str:
        return digest(self.model_dump(mode="json"))


# ---------------------------------------------------------------- loading


def load_study(path: str | Path) -> Study:
    """Read, validate and check a study file (`-`: standard input); raises StudyError
    listing every problem."""
    doc = document.read(path)
    study = study_from_document(doc, None if str(path) == document.STDIN else Path(path))
    refused = capabilities.problems(study)  # what its backend would drop or refuse, said here, not at submit
    if refused:
        raise StudyError(sorted(refused, key=_order))
    return study


def study_from_document(doc: document.Document, source: Path | None = None) -> Study:
    if not isinstance(doc.data, dict):
        raise StudyError([*doc.problems, doc.problem((), f"expected a mapping of study fields, got {_kind(doc.data)}")])
    space = doc.data.get("space")
    problems = set(doc.problems) | set(_template_problems(doc, list(space) if isinstance(space, dict) else None))
    try:
        study = Study.model_validate(
            doc.data, context={"backend": (doc.data or {}).get("backend") if isinstance(doc.data, dict) else None}
        )
    except ValidationError as e:
        problems |= document.validation_problems(doc, e, Study)
        raise StudyError(sorted(problems, key=_order)) from None
    if problems:
        raise StudyError(sorted(problems, key=_order))
    study._source = source
    study._doc = doc
    return study


def _order(p: Problem) -> tuple[Any, ...]:
    return (p.line or 0, p.column or 0, p.message)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )


def _template_problems(doc: document.Document, params: list[str] | None) -> list[Problem]:
    """Check every template string of the study file without rendering any."""
    env = sandbox.environment()
    problems = []
    allowed = set(sandbox.VARIABLES)
    for path, text in _strings(doc.data, ()):
        if path[0] not in ("trial", "checkpoint") or not sandbox.is_template(text):
            continue
        if path[:2] == ("trial", "template"):
            continue
        scope = allowed - {"checkpoint"} if path[0] == "checkpoint" else allowed
        for line, message in sandbox.check(env, text, scope, params):
            suffix = f" (line {line} of the template)" if line > 1 else ""
            problems.append(doc.problem(path, f"{'.'.join(map(str, path))}: {message}{suffix}"))
    return problems


def _strings(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str) and sandbox.is_template(k) and path and path[0] == "trial":
                yield path + (k,), k
            yield from _strings(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, path + (i,))


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a study file (what `stratctl schema` prints)."""
    schema = Study.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "stratctl study"}
