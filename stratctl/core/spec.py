"""The study: what a user writes in a study file, validated as a whole.

`load_study(path)` reads the YAML with positions (document.py), validates it with the
pydantic models below (the search space's are in distributions.py; whether the fields
agree with each other is checked in consistency.py), checks every template string
statically (sandbox.py), and raises one StudyError listing every problem as
`FILE:LINE:COL: message`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from stratctl.core import capabilities, consistency, document, sandbox, wording
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
from stratctl.core.model import batch_queue, dns_label
from stratctl.core.model import invalid as _bad
from stratctl.core.model import parse_duration as parse_duration
from stratctl.core.operations import (  # noqa: F401 - part of the study's public surface
    Checkpoint,
    Cost,
    Parallelism,
    Retries,
    Slurm,
    Throttle,
    Yarn,
)
from stratctl.core.quantity import GPU
from stratctl.core.trialspec import (  # noqa: F401 - part of the study's public surface
    MAX_REPLICAS,
    Policy,
    Resources,
    Task,
    Toleration,
    TrialSpec,
)
from stratctl.errors import Problem, StudyError

# Trial names are `<study>-<10 hex>` plus `-aNNN` for re-submissions; Volcano then appends
# `-<task>-<index>` for pod names, which must stay within a 63-character hostname.
MAX_NAME = 40
_PARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

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
    # first attempts sent as blocks, one scheduler object for many trials (core/merging.py)
    merge: Literal["off", "auto"] = "off"
    templates_dir: str | None = None

    _source: Path | None = PrivateAttr(default=None)
    _doc: document.Document | None = PrivateAttr(default=None)

    @field_validator("merge", mode="before")
    @classmethod
    def _merge(cls, v: Any) -> Any:
        """`merge: off` is YAML's false: the word the user wrote. `yes`, `true` and `on` are
        YAML's true, which is no value of `merge`."""
        if v is True:
            raise _bad("merge_bool", "must be 'off' or 'auto' (YAML reads yes, true and on as a boolean)")
        return "off" if v is False else v

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
    def _queue(cls, v: Any, info: ValidationInfo) -> Any:
        """A queue name, or a non-empty list of distinct ones (the order is the preference): a
        Volcano queue is a DNS label, a Slurm partition or YARN queue may hold '_', capitals, '.'."""
        name_of = batch_queue if (info.context or {}).get("backend") in ("slurm", "yarn") else dns_label
        if isinstance(v, str):
            return name_of(v, "queue")
        if not isinstance(v, list) or not v:
            raise _bad("queue", "queue must be a queue name or a non-empty list of queue names")
        seen: set[str] = set()
        for i, name in enumerate(v):
            if not isinstance(name, str):
                raise _bad("queue", "queue {i}: expected a queue name, got {got!r}", field=str(i), i=i, got=name)
            try:
                name_of(name, "queue")
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
        consistency.check_search(self.strategy, self.objectives, self.pruner, self.space)
        consistency.check_workload(self.backend, self.workload, self.trial, self.templates_dir)
        return self

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

    def file_relative(self, path: str) -> Path:
        """A path the study file states, resolved as `templates_dir` is: against the study
        file's directory (the working directory for a study read from standard input),
        never against wherever the command happens to run; `~` is the user's home."""
        stated = Path(path).expanduser()
        base = self._source.parent if self._source else Path.cwd()
        return (base / stated).resolve()

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
