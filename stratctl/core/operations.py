"""The sections of a study file that say how its trials are run rather than what they are:
checkpoint, retries, parallelism, throttle, cost, and the `slurm:` and `yarn:` blocks of
the batch-scheduler backends.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from stratctl.core import sandbox
from stratctl.core.model import Model as _Model
from stratctl.core.model import invalid as _bad
from stratctl.core.model import parse_duration


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
    # until it clears (backends/kubernetes/loop/shedding.py; critical studies only ever hold).
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
