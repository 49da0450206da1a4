"""The rendezvous contract on Kubernetes (its names: stratctl/rendezvous.py): each pod of a
trial finds its peers by their stable DNS names under a headless Service named after the
attempt's job, `MASTER_PORT` is `rendezvous.FIXED_PORT` (every pod has its own network).
The core Renderer stamps it on every attempt of a Kubernetes study through `RENDEZVOUS`
(core/contract.py's `Rendezvous`), handed in by `stratctl.backends.rendezvous_for`.

- A Volcano Job gets Volcano's `svc` plugin (it creates the headless Service `<job>`, owned
  by the job, and makes each pod's name `<job>-<task>-<index>` its hostname under the
  subdomain `<job>`) and its `env` plugin (`VC_TASK_INDEX`). Rank 0's address is
  `<job>-<first task>-0.<job>`.
- A batch/v1 Job runs Indexed (the Job controller names each pod's hostname
  `<job>-<index>`) with the subdomain `<job>`: the headless Service of that name, selecting
  the Job's pods, is stamped here as one more object of the attempt, owned by the Job (its
  uid is filled in when the Job has been created: `attempts/requeue.create_attempt`), so the
  garbage collector takes it with the Job.

Every container gets the whole contract. What every pod of the trial shares is computed here
as literal values (the addresses in rank order, the counts, the roles). A pod's own index is
read by the downward API from the annotation its controller sets (Volcano's
`volcano.sh/task-index`, an Indexed Job's `batch.kubernetes.io/job-completion-index`):
`STRATCTL_TASK_INDEX`. A rank is the task's first rank plus that index, and an environment
value cannot add. Where no sum is needed it is still a plain value: the first task's ranks are
its indexes (the same downward-API field), a task of one pod has one literal rank. A task of
several pods after the first starts through `/bin/sh -c` (the image needs a shell), which
exports `RANK` and `STRATCTL_NODE_RANK` (first + index) and execs the task's own command and
arguments unchanged (same process, signals and exit code): `WRAPPER`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stratctl import rendezvous
from stratctl.core.digest import HASH_CHARS
from stratctl.errors import Problem, StudyError

if TYPE_CHECKING:
    from stratctl.core.spec import Study

VOLCANO_INDEX = "volcano.sh/task-index"  # set on each pod by Volcano's job controller (createJobPod)
BATCH_INDEX = "batch.kubernetes.io/job-completion-index"  # set on each pod of an Indexed Job
# the Service publishes a pod's name as soon as it has an address, not once it is Ready: ranks
# look each other up while they start
SVC_ARGS = ["--publish-not-ready-addresses=true"]
HOSTNAME_MAX = 63  # a DNS label
ATTEMPTS = 999  # attempt suffixes the names leave room for (`-a999`)

# A task of several pods after the first: its rank is its first rank plus its index, which
# the shell adds. `$$` is Kubernetes' escape for `$` in a command (it expands `$(NAME)`).
WRAPPER = (
    'case "$STRATCTL_TASK_INDEX" in ""|*[!0-9]*) echo "stratctl: no task index for this pod '
    '(STRATCTL_TASK_INDEX=$STRATCTL_TASK_INDEX): no rendezvous contract" >&2; exit 1;; esac; '
    "RANK=$$(({first} + STRATCTL_TASK_INDEX)); STRATCTL_NODE_RANK=$RANK; "
    'export RANK STRATCTL_NODE_RANK; exec "$@"'
)
WRAPPER_NAME = "stratctl-rank"  # the script's $0


class NoCommand(Exception):
    """Tasks whose rank needs the wrapper have a container without a command to wrap."""

    def __init__(self, roles: list[Role]):
        super().__init__(", ".join(role.name for role in roles))
        self.roles = roles


@dataclass(frozen=True)
class Role:
    name: str
    replicas: int
    first: int  # the rank of its pod of index 0

    @property
    def wrapped(self) -> bool:
        """Whether its pods' rank needs the wrapper (a sum of first rank and index)."""
        return self.first > 0 and self.replicas > 1


@dataclass(frozen=True)
class Layout:
    """A trial's workload object and its pods by role, in rank order."""

    workload: str  # "volcano" | "batch"
    job: str  # the workload object's name as rendered
    roles: tuple[Role, ...]

    @property
    def index_field(self) -> str:
        key = VOLCANO_INDEX if self.workload == "volcano" else BATCH_INDEX
        return f"metadata.annotations['{key}']"

    def address(self, job: str, role: Role, index: int) -> str:
        host = f"{job}-{role.name}-{index}" if self.workload == "volcano" else f"{job}-{index}"
        return f"{host}.{job}"

    def keys(self) -> list[str]:
        """The keys of `values`: what changes with the attempt's job name."""
        return [
            "rendezvous.job",
            "rendezvous.addrs",
            "rendezvous.master",
            *(f"rendezvous.hosts.{k}" for k in range(len(self.roles))),
        ]

    def values(self, job: str) -> dict[str, str]:
        """The contract's strings that name the job (stamped as placeholders once per study)."""
        hosts = [[self.address(job, role, i) for i in range(role.replicas)] for role in self.roles]
        addrs = [a for h in hosts for a in h]
        out = {"rendezvous.job": job, "rendezvous.addrs": ",".join(addrs), "rendezvous.master": addrs[0]}
        out.update({f"rendezvous.hosts.{k}": ",".join(h) for k, h in enumerate(hosts)})
        return out

    def stamp(self, study: Study, docs: list[dict[str, Any]], values: Mapping[str, str]) -> None:
        """`stamp` the contract on `docs`; a task whose ranks need the wrapper and that has no
        command to wrap is the study's problem."""
        try:
            stamp(docs, self, values)
        except NoCommand as e:
            raise StudyError([_no_command(study, role) for role in e.roles]) from None


def _workload(docs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    for doc in docs:
        api = str(doc.get("apiVersion", ""))
        if doc.get("kind") == "Job" and api.startswith("batch.volcano.sh/"):
            return "volcano", doc
        if doc.get("kind") == "Job" and api == "batch/v1":
            return "batch", doc
    return None


def layout_of(docs: list[dict[str, Any]], tasks: list[str]) -> Layout | None:
    """The trial's workload in `docs` (a Volcano Job, or a batch/v1 Job whose one role is the
    study's task `tasks[0]`) and its pods by role; None when the manifests hold none. Raises
    ValueError when a count is not a number yet (a placeholder in a study's skeleton)."""
    found = _workload(docs)
    if found is None:
        return None
    workload, job = found
    spec = job.get("spec") or {}
    if workload == "volcano":
        counts = [(str(t.get("name")), t.get("replicas", 1)) for t in spec.get("tasks") or []]
    else:
        counts = [(tasks[0] if tasks else "worker", spec.get("completions", spec.get("parallelism", 1)))]
    roles, first = [], 0
    for name, replicas in counts:
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise ValueError(f"task {name}: replicas {replicas!r} is not a number")
        roles.append(Role(name, replicas, first))
        first += replicas
    if not roles or first == 0:
        return None
    return Layout(workload, str((job.get("metadata") or {}).get("name")), tuple(roles))


def stamp(docs: list[dict[str, Any]], layout: Layout, v: Mapping[str, Any]) -> None:
    """Make the contract true in `docs` (in place): the objects that give the pods their names
    and the environment of every container. `v`: `layout.values(job)`, or placeholders."""
    found = _workload(docs)
    assert found is not None, "stamp() is given the layout of a workload in docs"
    workload, job = found
    spec = job.setdefault("spec", {})
    if workload == "volcano":
        plugins = spec.get("plugins") or {}
        spec["plugins"] = {**plugins, "svc": plugins.get("svc", SVC_ARGS), "env": plugins.get("env", [])}
        pods = [(t.get("template") or {}).setdefault("spec", {}) for t in spec.get("tasks") or []]
    else:
        spec["completionMode"] = "Indexed"
        pods = [spec.setdefault("template", {}).setdefault("spec", {})]
        pods[0]["subdomain"] = v["rendezvous.job"]
        docs.append(_service(job, v["rendezvous.job"]))
    containers = [(pod.get("initContainers") or []) + (pod.get("containers") or []) for pod in pods]
    unwrappable = [
        role for role, of in zip(layout.roles, containers) if role.wrapped and not all(c.get("command") for c in of)
    ]
    if unwrappable:
        raise NoCommand(unwrappable)
    static = _shared(layout, v)
    for role, pod in zip(layout.roles, pods):
        env = static + _own(layout, role)
        names = {e["name"] for e in env} | {rendezvous.RANK, rendezvous.NODE_RANK}  # the wrapper's too
        for container in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            container["env"] = copy.deepcopy(env) + [
                e for e in container.get("env") or [] if e.get("name") not in names
            ]
            if role.wrapped:
                _wrap(container, role)


def _shared(layout: Layout, v: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What every pod of the trial is told alike."""
    size = str(sum(role.replicas for role in layout.roles))
    env = [
        (rendezvous.NUM_NODES, size),
        (rendezvous.NODE_ADDRS, v["rendezvous.addrs"]),
        (rendezvous.MASTER_ADDR, v["rendezvous.master"]),
        (rendezvous.MASTER_PORT, str(rendezvous.FIXED_PORT)),
        (rendezvous.WORLD_SIZE, size),
        (rendezvous.TASKS, ",".join(role.name for role in layout.roles)),
    ]
    for k, role in enumerate(layout.roles):
        env += [
            (rendezvous.hosts_var(role.name), v[f"rendezvous.hosts.{k}"]),
            (rendezvous.num_var(role.name), str(role.replicas)),
        ]
    return [{"name": name, "value": value} for name, value in env]


def _own(layout: Layout, role: Role) -> list[dict[str, Any]]:
    """What the pods of one role are told: the role, and the index and rank of each pod."""

    def index() -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": layout.index_field}}}

    env = [{"name": rendezvous.TASK, "value": role.name}, {"name": rendezvous.TASK_INDEX, **index()}]
    if role.wrapped:
        return env  # RANK and STRATCTL_NODE_RANK: exported by the wrapper
    return env + [
        {"name": name, **(index() if role.first == 0 else {"value": str(role.first)})}
        for name in (rendezvous.NODE_RANK, rendezvous.RANK)
    ]


def _wrap(container: dict[str, Any], role: Role) -> None:
    container["command"] = ["/bin/sh", "-c", WRAPPER.format(first=role.first), WRAPPER_NAME, *container["command"]]


def _service(job: dict[str, Any], name: str) -> dict[str, Any]:
    """The headless Service whose name is the pods' subdomain, owned by the Job (uid filled
    in at creation) and selecting its pods by the label the Job controller gives them."""
    meta = job.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": ""}],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": name},
        },
    }


# ---------------------------------------------------------------- names


def name_problems(study: Study) -> list[tuple[tuple[Any, ...], str]]:
    """(field, message) of each name the contract's DNS names cannot carry: the Service is
    named after the job (a DNS-1035 label: it starts with a letter) and each pod's hostname
    (`<job>-<task>-<index>`, `<job>-<index>` for batch) is a DNS label of at most 63
    characters, for every attempt up to ATTEMPTS. Tasks whose replicas are templates are
    checked per trial shape."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if not study.name[:1].isalpha():
        found.append(
            (
                ("name",),
                f"name: the study name {study.name!r} starts each trial's job name, which names "
                "its headless Service on Kubernetes (the pods' DNS names), and a Service name "
                "must start with a letter",
            )
        )
    job = len(study.name) + 1 + HASH_CHARS + len(f"-a{ATTEMPTS}")
    for i, task in enumerate(study.trial.tasks):
        if not isinstance(task.replicas, int):
            continue
        index = len(str(task.replicas - 1))
        longest = job + 1 + (len(task.name) + 1 if study.workload == "volcano" else 0) + index
        if longest <= HOSTNAME_MAX:
            continue
        pattern = f"<job>-{task.name}-<index>" if study.workload == "volcano" else "<job>-<index>"
        over = longest - HOSTNAME_MAX
        found.append(
            (
                ("trial", "tasks", i, "name"),
                f"trial.tasks.{i}.name: each pod of task {task.name!r} is named {pattern} in its trial's DNS "
                f"(its hostname), up to {longest} characters with this study name (attempt {ATTEMPTS}, index "
                f"{task.replicas - 1}), over the {HOSTNAME_MAX} a hostname may have: shorten the study name "
                f"({len(study.name)} characters) or the task name by {over}",
            )
        )
    return found


def _no_command(study: Study, role: Role) -> Problem:
    where = next((("trial", "tasks", i) for i, t in enumerate(study.trial.tasks) if t.name == role.name), ("trial",))
    return study.problem(
        where,
        f"{'.'.join(map(str, where))}: the {role.replicas} pods of task {role.name!r} "
        f"start at rank {role.first}, and a pod learns its rank on Kubernetes as that "
        f"plus its "
        f"index, which /bin/sh adds before it execs the task's command; the task has "
        f"no command to start that way (the image's entrypoint cannot be): set "
        f"command (the task's or trial.command)",
    )


# ---------------------------------------------------------------- the Renderer's step


class KubernetesRendezvous:
    """The contract as the core Renderer is handed it (core/contract.py's `Rendezvous`)."""

    def problems(self, study: Study) -> list[Problem]:
        return [study.problem(path, message) for path, message in name_problems(study)]

    def layout(self, study: Study, docs: list[dict[str, Any]]) -> Layout | None:
        return layout_of(docs, [t.name for t in study.trial.tasks])


RENDEZVOUS = KubernetesRendezvous()
