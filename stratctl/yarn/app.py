"""An attempt's YARN application, from the attempt as the study renders it (pure).

One attempt is one application of type `yarn.application_type` (STRATCTL) in the study's
queue, whose application master is stratctl's gang AM (yarn-am/GangMaster.java). The AM
reads the gang from its environment: N containers (`STRATCTL_TASKS`) of the task's memory,
vcores and GPUs (`yarn.io/gpu`), where (`STRATCTL_NODE_LABEL`, `STRATCTL_PLACEMENT`), and
the task's script (`STRATCTL_TASK_SCRIPT`, base64 of templates/yarn-task.sh.j2 rendered:
the trial's command and STRATCTL_* environment, every value shell-quoted). The
NodeManager pastes an AM command into `bash -c "..."` unescaped, so nothing of the
study's goes into a command line: it all travels base64-encoded in the environment.

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

from jinja2 import FileSystemLoader

from stratctl.study import sandbox
from stratctl.study.spec import Study
from stratctl.study.task import Task, task_of

TEMPLATE = "yarn-task.sh.j2"
AM_CLASS = "io.stratctl.yarn.GangMaster"
AM_JAR = "stratctl-yarn-am.jar"  # its name in the AM's working directory
DEFAULT_TASK_MB = 1024  # a task's memory when the trial asks none (YARN needs one)
PREFIX = "stratctl"


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
class Application:
    """One attempt as YARN runs it."""

    name: str  # the application name: the attempt's name
    trial: str
    attempt: int
    tag: str  # this attempt's own tag (looked up before a lost submission is sent again)
    tags: list[str]
    script: str  # each container's script
    tasks: int
    gpus: int  # GPUs of the whole gang
    environment: dict[str, str]  # the AM's (the gang, the script)

    def body(self, app_id: str, study: Study, jar: Jar, classpath: list[str]) -> dict:
        """The REST submission (POST /ws/v1/cluster/apps) of this attempt as `app_id`."""
        yarn = study.yarn
        heap = max(32, int(yarn.am_memory_mb * 0.75))
        command = (f"java -Xmx{heap}m {AM_CLASS} 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr")
        environment = {**self.environment, "CLASSPATH": ":".join(["./*", *classpath])}
        body = {
            "application-id": app_id, "application-name": self.name, "queue": yarn.queue,
            "application-type": yarn.application_type, "application-tags": {"tag": self.tags},
            "max-app-attempts": yarn.max_app_attempts, "unmanaged-AM": False,
            "keep-containers-across-application-attempts": False,
            "resource": {"memory": yarn.am_memory_mb, "vCores": 1},
            "am-container-spec": {
                "local-resources": {"entry": [{"key": AM_JAR, "value": {
                    "resource": jar.url, "type": "FILE", "visibility": "APPLICATION",
                    "size": jar.size, "timestamp": jar.timestamp}}]},
                "commands": {"command": command},
                "environment": {"entry": [{"key": k, "value": v} for k, v in environment.items()]},
            },
        }
        if yarn.node_label:
            body["app-node-label-expression"] = yarn.node_label
            body["am-container-node-label-expression"] = yarn.node_label
        return body


def attempt_tag(study: str, trial: str, attempt: int) -> str:
    digest = hashlib.sha256(f"{study}/{trial}/{attempt}".encode()).hexdigest()[:32]
    return f"{PREFIX}-attempt:{digest}"


def study_tag(study: str) -> str:
    return f"{PREFIX}-study:{study}"


def parse_tags(tags: str | list | None) -> dict[str, str]:
    """stratctl's tags of an application (the RM lists them comma-separated): key → value."""
    words = tags.split(",") if isinstance(tags, str) else list(tags or [])
    out = {}
    for word in words:
        key, sep, value = word.strip().partition(":")
        if sep and key.startswith(PREFIX + "-"):
            out[key[len(PREFIX) + 1:]] = value
    return out


def resources(task: Task) -> str:
    """A container's resources as the AM asks for them: memory-mb=…,vcores=…,yarn.io/gpu=…"""
    mb = math.ceil(task.memory / 2**20) if task.memory else DEFAULT_TASK_MB
    out = f"memory-mb={mb},vcores={task.cpus or 1}"
    return out + (f",yarn.io/gpu={task.gpus}" if task.gpus else "")


@functools.lru_cache(maxsize=8)
def _template(directories: tuple[str, ...]):
    """The sandboxed, compiled task template of these directories (compiled once a run)."""
    return sandbox.environment(FileSystemLoader(list(directories))).get_template(TEMPLATE)


def build(study: Study, docs: list[dict], templates: list[Path], output: Path) -> Application:
    """The application of one rendered attempt (`docs`: the study's manifests of it);
    `output`: the study's output directory as the nodes see it (absolute)."""
    task = task_of(docs)
    trial_output = shlex.quote(str(output / task.trial))
    script = _template(tuple(str(d) for d in templates)).render(
        env=[(key, shlex.quote(value)) for key, value in task.env],
        command=" ".join(shlex.quote(word) for word in task.command), output=trial_output)
    yarn = study.yarn
    own = attempt_tag(study.name, task.trial, task.attempt)
    tags = [PREFIX, study_tag(study.name), f"{PREFIX}-trial:{task.trial}", f"{PREFIX}-n:{task.attempt}",
            *([f"{PREFIX}-spec:{task.spec_hash}"] if task.spec_hash else []), own, *yarn.tags]
    environment = {
        "STRATCTL_TASKS": str(task.replicas),
        "STRATCTL_TASK_RESOURCES": resources(task),
        "STRATCTL_TASK_SCRIPT": base64.b64encode(script.encode()).decode(),
        "STRATCTL_PLACEMENT": "" if yarn.placement == "any" else yarn.placement,
        "STRATCTL_PLACEMENT_SCOPE": yarn.placement_scope,
        "STRATCTL_GANG_TIMEOUT": str(int(yarn.gang_timeout_seconds)),
        **({"STRATCTL_NODE_LABEL": yarn.node_label} if yarn.node_label else {}),
    }
    return Application(name=task.name, trial=task.trial, attempt=task.attempt, tag=own, tags=[t.lower() for t in tags],
                       script=script, tasks=task.replicas, gpus=task.gpus * task.replicas, environment=environment)
