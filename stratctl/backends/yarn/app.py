"""An attempt's YARN application, from the attempt as the study renders it (pure).

One attempt is one application of type `yarn.application_type` (STRATCTL) in the study's
queue, whose application master is stratctl's gang AM (yarn-am/GangMaster.java). A trial's
tasks are the gang's roles (a parameter server, workers, an evaluator), each its own
containers' size and script. The AM reads the gang from its environment
(`STRATCTL_AM_*`): the roles in task order with their counts (`STRATCTL_AM_ROLES`), each
role's memory, vcores and GPUs (`yarn.io/gpu`, `STRATCTL_AM_RESOURCES_<i>`) and script
(`STRATCTL_AM_SCRIPT_<i>`, base64 of templates/yarn-task.sh.j2 rendered: the task's command
and STRATCTL_* environment, every value shell-quoted), where (`STRATCTL_AM_NODE_LABEL`,
`STRATCTL_AM_PLACEMENT`), and the trial's rendezvous port (`STRATCTL_AM_MASTER_PORT`,
`rendezvous.derived_port` of the application id's sequence number: trials share their
nodes' network, so two on one node must not collide). The AM knows every container's host
once the gang is whole and gives each the rest of the rendezvous contract
(stratctl/rendezvous.py) itself. The NodeManager pastes an AM command into `bash -c "..."`
unescaped, so nothing of the study's goes into a command line: it all travels
base64-encoded in the environment.

Tags are how stratctl finds its applications again (YARN keeps them lowercase):
`stratctl`, `stratctl-study:<study>`, `stratctl-trial:<trial>`, `stratctl-n:<attempt>`,
`stratctl-spec:<hash>` and `stratctl-attempt:<digest>`, one attempt's own tag, looked up
before a submission whose answer was lost is sent again.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, Template

from stratctl import rendezvous
from stratctl.core import sandbox
from stratctl.core.spec import Study
from stratctl.core.task import Task, tasks_of

TEMPLATE = "yarn-task.sh.j2"
AM_CLASS = "io.stratctl.yarn.GangMaster"
AM_JAR = "stratctl-yarn-am.jar"  # its name in the AM's working directory
DEFAULT_TASK_MB = 1024  # a task's memory when the trial asks none (YARN needs one)
PREFIX = "stratctl"
# The gang AM's JVM: it mostly waits on heartbeats, so the quick compiler alone and the serial
# collector serve it, and a short trial's AM starts on far less CPU (a study of 12 trials that
# exit at once, 4 at a time, on the 2-core testbed: 16.6 s with the JVM's defaults, 12.3 s with these)
AM_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@dataclass(frozen=True)
class Jar:
    """The gang AM's jar as a local resource: where every NodeManager reads it, its size and
    its modification time in milliseconds (the NodeManager checks both)."""

    url: str
    size: int
    timestamp: int

    @classmethod
    def of(cls, path: Path) -> Jar:
        stat = path.stat()
        return cls(path.resolve().as_uri(), stat.st_size, stat.st_mtime_ns // 1_000_000)


@dataclass(frozen=True)
class Role:
    """One task of the trial as the gang AM runs it: `replicas` containers of one size, each
    running the same script."""

    name: str  # the task's name: STRATCTL_TASK of its containers
    replicas: int
    resources: str  # a container's, as the AM asks for it (`resources`)
    gpus: int  # per container
    script: str  # each of its containers' script


@dataclass(frozen=True)
class Application:
    """One attempt as YARN runs it."""

    name: str  # the application name: the attempt's name
    trial: str
    attempt: int
    tag: str  # this attempt's own tag (looked up before a lost submission is sent again)
    tags: list[str]
    roles: list[Role]  # in task order: the order of the ranks
    environment: dict[str, str]  # the AM's (the gang, the scripts), but for the port of its application id

    @property
    def tasks(self) -> int:
        """Containers of the whole gang."""
        return sum(role.replicas for role in self.roles)

    @property
    def gpus(self) -> int:
        """GPUs of the whole gang."""
        return sum(role.gpus * role.replicas for role in self.roles)

    def body(self, app_id: str, study: Study, jar: Jar, classpath: list[str]) -> dict[str, Any]:
        """The REST submission (POST /ws/v1/cluster/apps) of this attempt as `app_id`."""
        yarn = study.yarn
        heap = max(32, int(yarn.am_memory_mb * 0.75))
        command = (
            f"java -Xmx{heap}m {' '.join(AM_JVM)} {AM_CLASS} 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr"
        )
        environment = {
            **self.environment,
            "STRATCTL_AM_MASTER_PORT": str(master_port(app_id)),
            "CLASSPATH": ":".join(["./*", *classpath]),
        }
        body = {
            "application-id": app_id,
            "application-name": self.name,
            "queue": queues_of(study)[0],  # the first; the loop moves it on past the bound (batch/moves.py)
            "application-type": yarn.application_type,
            "application-tags": {"tag": self.tags},
            "max-app-attempts": yarn.max_app_attempts,
            "unmanaged-AM": False,
            "keep-containers-across-application-attempts": False,
            "resource": {"memory": yarn.am_memory_mb, "vCores": 1},
            "am-container-spec": {
                "local-resources": {
                    "entry": [
                        {
                            "key": AM_JAR,
                            "value": {
                                "resource": jar.url,
                                "type": "FILE",
                                "visibility": "APPLICATION",
                                "size": jar.size,
                                "timestamp": jar.timestamp,
                            },
                        }
                    ]
                },
                "commands": {"command": command},
                "environment": {"entry": [{"key": k, "value": v} for k, v in environment.items()]},
            },
        }
        if yarn.node_label:
            body["app-node-label-expression"] = yarn.node_label
            body["am-container-node-label-expression"] = yarn.node_label
        return body


def master_port(app_id: str) -> int:
    """The trial's MASTER_PORT as application `app_id` (application_<cluster>_<sequence>):
    derived from the sequence number, so concurrent trials sharing a node differ."""
    return rendezvous.derived_port(int(app_id.rsplit("_", 1)[-1]))


def attempt_tag(study: str, trial: str, attempt: int) -> str:
    digest = hashlib.sha256(f"{study}/{trial}/{attempt}".encode()).hexdigest()[:32]
    return f"{PREFIX}-attempt:{digest}"


def study_tag(study: str) -> str:
    return f"{PREFIX}-study:{study}"


def parse_tags(tags: str | list[Any] | None) -> dict[str, str]:
    """stratctl's tags of an application (the RM lists them comma-separated): key → value."""
    words = tags.split(",") if isinstance(tags, str) else list(tags or [])
    out = {}
    for word in words:
        key, sep, value = word.strip().partition(":")
        if sep and key.startswith(PREFIX + "-"):
            out[key[len(PREFIX) + 1 :]] = value
    return out


def resources(task: Task) -> str:
    """A container's resources as the AM asks for them: memory-mb=…,vcores=…,yarn.io/gpu=…"""
    mb = math.ceil(task.memory / 2**20) if task.memory else DEFAULT_TASK_MB
    out = f"memory-mb={mb},vcores={task.cpus or 1}"
    return out + (f",yarn.io/gpu={task.gpus}" if task.gpus else "")


@functools.lru_cache(maxsize=8)
def _template(directories: tuple[str, ...]) -> Template:
    """The sandboxed, compiled task template of these directories (compiled once a run)."""
    return sandbox.environment(FileSystemLoader(list(directories))).get_template(TEMPLATE)


def contract_names(roles: list[str]) -> set[str]:
    """The variables of the rendezvous contract of a gang of these roles: the AM sets them in
    each container, so the script must not set them again from the rendered environment."""
    return {
        rendezvous.NUM_NODES,
        rendezvous.NODE_RANK,
        rendezvous.NODE_ADDRS,
        rendezvous.TASK,
        rendezvous.TASK_INDEX,
        rendezvous.TASKS,
        rendezvous.MASTER_ADDR,
        rendezvous.MASTER_PORT,
        rendezvous.WORLD_SIZE,
        rendezvous.RANK,
        *map(rendezvous.hosts_var, roles),
        *map(rendezvous.num_var, roles),
    }


def build(study: Study, docs: list[dict[str, Any]], templates: list[Path], output: Path) -> Application:
    """The application of one rendered attempt (`docs`: the study's manifests of it);
    `output`: the study's output directory as the nodes see it (absolute)."""
    tasks = tasks_of(docs)
    first = tasks[0]
    trial_output = shlex.quote(str(output / first.trial))
    template = _template(tuple(str(d) for d in templates))
    contract = contract_names([task.role for task in tasks])
    roles = [
        Role(
            task.role,
            task.replicas,
            resources(task),
            task.gpus,
            template.render(
                env=[(key, shlex.quote(value)) for key, value in task.env if key not in contract],
                command=" ".join(shlex.quote(word) for word in task.command),
                output=trial_output,
                log=shlex.quote(str(output / first.trial / f"{first.name}.{task.role}")),
            ),
        )
        for task in tasks
    ]
    yarn = study.yarn
    own = attempt_tag(study.name, first.trial, first.attempt)
    tags = [
        PREFIX,
        study_tag(study.name),
        f"{PREFIX}-trial:{first.trial}",
        f"{PREFIX}-n:{first.attempt}",
        *([f"{PREFIX}-spec:{first.spec_hash}"] if first.spec_hash else []),
        own,
        *yarn.tags,
    ]
    environment = {
        "STRATCTL_AM_ROLES": ",".join(f"{role.name}:{role.replicas}" for role in roles),
        **{f"STRATCTL_AM_RESOURCES_{i}": role.resources for i, role in enumerate(roles)},
        **{f"STRATCTL_AM_SCRIPT_{i}": base64.b64encode(role.script.encode()).decode() for i, role in enumerate(roles)},
        "STRATCTL_AM_PLACEMENT": "" if yarn.placement == "any" else yarn.placement,
        "STRATCTL_AM_PLACEMENT_SCOPE": yarn.placement_scope,
        "STRATCTL_AM_GANG_TIMEOUT": str(int(yarn.gang_timeout_seconds)),
        **({"STRATCTL_AM_NODE_LABEL": yarn.node_label} if yarn.node_label else {}),
    }
    return Application(
        name=first.name,
        trial=first.trial,
        attempt=first.attempt,
        tag=own,
        tags=[t.lower() for t in tags],
        roles=roles,
        environment=environment,
    )


def queues_of(study: Study) -> tuple[str, ...]:
    """The queues the study's applications may wait in, in order: its `queue` (a name, or
    a list: queue fallback), else `yarn.queue`."""
    return study.queues if study.queue != "default" else (study.yarn.queue,)
