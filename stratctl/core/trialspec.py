"""The `trial:` section of a study file: the template of every trial's pods (its tasks,
their resources, commands, environment, pod fields and Volcano lifecycle policies),
validated field by field; `spec.Study` checks it against the rest of the study.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from stratctl.core import sandbox
from stratctl.core.model import Model as _Model
from stratctl.core.model import dns_label
from stratctl.core.model import invalid as _bad
from stratctl.core.pod import Affinity, EnvFrom, SecurityContext, Volume, VolumeMount, undefined_mounts
from stratctl.core.quantity import GPU, gpus_of
from stratctl.core.topology import NetworkTopology

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
