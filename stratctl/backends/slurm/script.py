"""An attempt's sbatch script, from the attempt as the study renders it (pure).

The study core renders every attempt the same way for every backend: the trial template,
its parameters and stratctl's STRATCTL_* environment (study, trial, attempt, checkpoint,
resume flag, parameters). A Slurm attempt takes from that rendering what a batch job
needs, the task's command line, environment and resources, and puts it in the sbatch
script of `templates/slurm-job.sh.j2`: one job whose tasks are the gang (Slurm starts
them together or not at all), GPUs as `--gpus-per-task=[type:]<n>` (the type from
`slurm.gres`, e.g. `gpu:a100`), the study's `slurm:` block as #SBATCH options. Every value is shell-quoted here, so no
parameter value can become a command or a second #SBATCH line.

The rendezvous contract (stratctl/rendezvous.py) is the script's to complete where it runs:
here go the parts known before (the role, its variables' names, how MASTER_PORT derives from
the job id); the nodes' addresses and each task's rank exist only once Slurm has placed the
tasks, so the script reads them from Slurm (NodeAddr, the step's layout, SLURM_PROCID).
"""

from __future__ import annotations

import functools
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, Template

from stratctl import rendezvous
from stratctl.backends.batch.scheduler import study_directory
from stratctl.core import sandbox
from stratctl.core.spec import Study
from stratctl.core.task import Task, tasks_of

TEMPLATE = "slurm-job.sh.j2"
COMMENT_PREFIX = "stratctl:"  # the comment of every job stratctl submits: stratctl:<study>/<trial>/<attempt>/<hash>


@dataclass(frozen=True)
class Script:
    """One attempt as Slurm runs it."""

    job: str  # the job name: the attempt's name, unique in the study
    trial: str
    attempt: int
    comment: str  # looked up before a job is submitted again (exactly once across crashes)
    text: str  # the sbatch script
    tasks: int
    gpus: int  # GPUs of the whole gang
    options: tuple[str, ...] = ()  # its #SBATCH options
    log: str = ""  # its log file, less the job id and `.log` (`<output>/<attempt>`)


def comment_of(study: str, trial: str, attempt: int, spec_hash: str) -> str:
    return f"{COMMENT_PREFIX}{study}/{trial}/{attempt}/{spec_hash}"


def comment_prefix(study: str) -> str:
    """What the comment of every job of a study starts with."""
    return f"{COMMENT_PREFIX}{study}/"


def parse_comment(comment: str | None) -> tuple[str, str, int, str] | None:
    """(study, trial, attempt, spec hash) of a job stratctl submitted; None for another job."""
    if not comment or not comment.startswith(COMMENT_PREFIX):
        return None
    parts = comment[len(COMMENT_PREFIX) :].split("/")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2]), parts[3]


@functools.lru_cache(maxsize=8)
def _template(directories: tuple[str, ...]) -> Template:
    """The sandboxed, compiled job template of these directories: compiled once a run, not
    once an attempt (a fresh sandbox and compile took most of a submit's own time)."""
    return sandbox.environment(FileSystemLoader(list(directories))).get_template(TEMPLATE)


def build(study: Study, docs: list[dict[str, Any]], templates: list[Path], directory: Path | None = None) -> Script:
    """The sbatch script of one rendered attempt (`docs`: the study's manifests of it),
    from the first of `templates` (directories) holding templates/slurm-job.sh.j2. A trial
    of several tasks (roles) is a heterogeneous job: one component per task, in task order,
    each with its own tasks, resources and command. `directory`: the study directory
    (default: backends/batch/scheduler.py's `study_directory`), written absolute into the script, so
    the job writes where every later run reads, wherever sbatch ran."""
    tasks = tasks_of(docs)
    first = tasks[0]
    name, trial, attempt = first.name, first.trial, first.attempt
    comment = comment_of(study.name, trial, attempt, first.spec_hash)
    output = str((directory or study_directory(study)) / trial)
    options: list[str] = []
    for i, task in enumerate(tasks):
        if i:
            options.append("hetjob")  # the next component: Slurm starts them all together or none
            options += _component(study, task, [])
        else:
            options += _component(study, task, [f"--job-name={name}", f"--comment={comment}"], output)
    shared = [pair for pair in first.env if all(pair in task.env for task in tasks[1:])]
    env = [(key, shlex.quote(value)) for key, value in shared]
    steps = [
        {
            "env": [shlex.quote(f"{key}={value}") for key, value in task.env if (key, value) not in shared],
            "command": " ".join(shlex.quote(word) for word in task.command),
        }
        for task in tasks
    ]
    rdv = {
        "roles": [shlex.quote(task.role) for task in tasks],
        "role_keys": [rendezvous.role_key(task.role) for task in tasks],
        "port_base": rendezvous.PORT_BASE,
        "port_span": rendezvous.PORT_SPAN,
    }
    text = _template(tuple(str(d) for d in templates)).render(
        options=options,
        env=env,
        command=steps[0]["command"],
        steps=steps,
        output=shlex.quote(output),
        attempt=attempt,
        rdv=rdv,
    )
    return Script(
        job=name,
        trial=trial,
        attempt=attempt,
        comment=comment,
        text=text,
        tasks=sum(t.replicas for t in tasks),
        gpus=sum(t.gpus * t.replicas for t in tasks),
        options=tuple(options),
        log=f"{output}/{first.name}",
    )


ARRAY_TEMPLATE = "slurm-array.sh.j2"
TASKS = ".tasks"  # a block's task file: `.blocks/<block>.tasks`, a line per array task
NAMED = ("--job-name=", "--comment=", "--output=")  # each attempt's own options: a block has its own
# what the job script of a block reads from the task's line (templates/slurm-array.sh.j2)
BLOCK_OUTPUT = '"$stratctl_output"'
BLOCK_COMMAND = '"${stratctl_command[@]}"'


def block_comment(study: str, block: str, spec_hash: str) -> str:
    """A block's comment: its name where an attempt's names its trial (state.BLOCK_MARK)."""
    return comment_of(study, f"@{block}", 0, spec_hash)


def task_line(task: Task) -> str:
    """A first attempt's line of its block's task file (templates/slurm-array.sh.j2 reads it
    with bash alone): tab-separated fields, each with backslash, tab and newline escaped as
    printf %b undoes them; the trial, how many NAME=value words of its environment follow,
    those words, then its command line word by word."""
    words = [task.trial, str(len(task.env)), *(f"{key}={value}" for key, value in task.env), *task.command]
    return "\t".join(w.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") for w in words) + "\n"


def block_script(
    study: Study, block: str, tasks: list[Task], throttle: int, templates: list[Path], directory: Path | None = None
) -> Script:
    """One block of first attempts (merged submissions, core/merging.py) as one job array:
    task i runs `tasks[i]` (each a trial of one task of one process), read from line i of
    the block's task file (`task_line`, written beside the block's trial list beforehand);
    at most `throttle` tasks at once (ArrayTaskThrottle, changed live by the loop). The job
    script is the one an attempt runs on its own, rendered once with the trial's output
    directory, environment and command line as shell variables the task sets from its
    line; the options are the first attempt's (the trials share one shape), its job name,
    comment and log file the block's own."""
    first = tasks[0]
    directory = directory or study_directory(study)
    comment = block_comment(study.name, block, study.spec_hash)
    options = [
        f"--job-name={study.name}-{block}",
        f"--comment={comment}",
        f"--array=0-{len(tasks) - 1}%{max(1, throttle)}",
        f"--output={directory}/.blocks/{block}.log",  # what a task says before its trial's log is open
        "--open-mode=append",
        *_component(study, first, []),
    ]
    folders = tuple(str(d) for d in templates)
    job = _template(folders).render(
        options=[],
        env=[],  # exported from the task's line before the script runs
        command=BLOCK_COMMAND,
        steps=[{"env": [], "command": BLOCK_COMMAND}],
        output=BLOCK_OUTPUT,
        attempt=0,
        rdv={
            "roles": [shlex.quote(first.role)],
            "role_keys": [rendezvous.role_key(first.role)],
            "port_base": rendezvous.PORT_BASE,
            "port_span": rendezvous.PORT_SPAN,
        },
    )
    text = _array_template(folders).render(
        options=options,
        tasks=shlex.quote(str(directory / ".blocks" / f"{block}{TASKS}")),
        output=shlex.quote(str(directory)),
        job=job,
    )
    return Script(
        job=f"{study.name}-{block}",
        trial=f"@{block}",
        attempt=0,
        comment=comment,
        text=text,
        tasks=len(tasks),
        gpus=sum(t.gpus * t.replicas for t in tasks),
        options=tuple(options),
    )


@functools.lru_cache(maxsize=8)
def _array_template(directories: tuple[str, ...]) -> Template:
    return sandbox.environment(FileSystemLoader(list(directories))).get_template(ARRAY_TEMPLATE)


def partitions(study: Study) -> tuple[str, ...]:
    """The partitions the study's jobs may run in: its `queue` (a name, or a list: queue
    fallback), else `slurm.partition`; none: the cluster's default partition.

    A list goes to Slurm whole, as `--partition=a,b`: Slurm's own multi-partition submission
    starts each job in whichever listed partition can start it first (higher PriorityTier
    partitions considered first, the list order not a preference), in one job, so no
    loop has to watch a bound and move it, and a job never waits in a full partition
    while another listed one has room."""
    if study.queue != "default":  # set: `validate` refuses it together with slurm.partition
        return study.queues
    return (study.slurm.partition,) if study.slurm.partition else ()


def placement(study: Study) -> list[str]:
    """Where the study's jobs go and on whose account: its partitions, account and QOS, as
    every job of the study asks them (its attempts, and its driver, backends/slurm/driver.py)."""
    slurm = study.slurm
    chosen = (("partition", ",".join(partitions(study))), ("account", slurm.account), ("qos", slurm.qos))
    return [f"--{key}={value}" for key, value in chosen if value]


def _component(study: Study, task: Task, first: list[str], output: str | None = None) -> list[str]:
    """The #SBATCH options of one component (task) of the job: `first` and the log file
    `output` directory for the first component only."""
    slurm = study.slurm
    options = list(first)
    options += [f"--ntasks={task.replicas}", f"--time={slurm.minutes}"]
    options += [f"--output={output}/{task.name}-%j.log", "--requeue"] if output is not None else ["--requeue"]
    options += placement(study)
    options += [f"--constraint={slurm.constraint}"] if slurm.constraint else []
    if task.gpus:
        options.append(f"--gpus-per-task={slurm.gres.split(':', 1)[1] + ':' if ':' in slurm.gres else ''}{task.gpus}")
    if task.cpus:
        options.append(f"--cpus-per-task={task.cpus}")
    if task.memory:
        options.append(f"--mem-per-cpu={math.ceil(task.memory / (task.cpus or 1) / 2**20)}M")
    options += slurm.extra
    return options
