"""Slurm's own commands, run as processes: what the Slurm backend sends and reads.

`sbatch` submits, `squeue --json` lists, `scancel`, `scontrol` hold, release and requeue.
Nothing here depends on job accounting (`sacct` needs slurmdbd, which many sites and the
testbed do not run): a job is seen through `squeue` while the controller remembers it
(MinJobAge), and an ended attempt leaves its result file beside its log.

A command's failure is sorted the way the API server's answers are: the controller busy or
unreachable ("Socket timed out", "temporarily unable to accept job", refused connections)
is `Unavailable`, to back off from and retry; a submit limit reached (MaxSubmitJobs, an
association or QOS limit) is `Throttled`, pressure to slow down for; anything else is
`Invalid`, the verdict on that one job.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stratctl.errors import Invalid, Throttled, Unavailable, Unreachable

Run = Callable[..., subprocess.CompletedProcess[Any]]

# what sbatch, squeue and scontrol print when the controller cannot take a request now
TRANSIENT = re.compile(
    r"socket timed out|temporarily unable to accept|unable to contact slurm controller|connection refused|"
    r"resource temporarily unavailable|slurm_receive_msg|zero bytes were transmitted|slurmctld.*not responding|"
    r"communication connection failure|insufficient resources.*try again|try again later",
    re.IGNORECASE,
)
# a submit limit: the cluster's way of saying "not so many at once"
PRESSURE = re.compile(
    r"MaxSubmitJobs|SubmitJobLimit|MaxSubmit|job submit limit|QOSMaxSubmitJob|AssocMaxSubmitJob", re.IGNORECASE
)


# Slurm's commands find no cluster at all: nothing to wait for, a setup to fix
NO_CLUSTER = re.compile(
    r"could not establish a configuration source|fetch_config: DNS SRV lookup failed|"
    r"unable to process configuration file|can't open (slurm )?config",
    re.IGNORECASE,
)


def error_of(command: str, code: int, stderr: str) -> Exception:
    """The error a failed command stands for (see the module docstring)."""
    if NO_CLUSTER.search(stderr):
        return Unreachable(
            f"{command}: Slurm's commands find no cluster from here "
            f"(SLURM_CONF is {os.environ.get('SLURM_CONF') or 'not set'}"
            ", and no slurm.conf or DNS SRV record of a controller is found otherwise): set SLURM_CONF to the "
            "cluster's slurm.conf (the local testbed's: `source \"$(bash testbed/slurm/up.sh | tail -1)\"`)"
        )
    # each line starts with the command's own name ("squeue: error: ..."): said once
    lines = [line.removeprefix(f"{command}: ") for line in stderr.splitlines() if line.strip()]
    text = " ".join(" ".join(lines).split())[:400] or f"exit status {code}"
    message = f"{command}: {text}"
    if PRESSURE.search(stderr):
        return Throttled(message, status=429)
    if TRANSIENT.search(stderr) or code < 0:  # killed by a signal (a timeout): no answer
        return Unavailable(message)
    return Invalid(message, status=422)


@dataclass(frozen=True)
class Listed:
    """One job as `squeue --format` lists it."""

    job: int
    state: str  # RUNNING, PENDING, COMPLETED, FAILED, CANCELLED...
    reason: str  # why it waits or ended (`None` when nothing to say)
    nodes: str  # where it runs ("" while pending)


@dataclass
class Slurm:
    """One Slurm cluster as its commands see it (SLURM_CONF and the like come from `env`)."""

    env: dict[str, str] | None = None
    run: Run = subprocess.run
    timeout: float = 60.0
    calls: int = 0  # commands run, for the loop's counters
    sent: dict[str, int] = field(default_factory=dict)  # commands run, by command
    refused: dict[str, int] = field(default_factory=dict)  # of those, refused for a submit limit (Throttled)

    def _run(self, argv: list[str], stdin: str | None = None) -> str:
        self.calls += 1
        self.sent[argv[0]] = self.sent.get(argv[0], 0) + 1
        env = {**os.environ, **(self.env or {})}
        try:
            done = self.run(argv, input=stdin, capture_output=True, text=True, timeout=self.timeout, env=env)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"{argv[0]}: no answer in {self.timeout:g}s") from None
        except FileNotFoundError:
            raise Invalid(
                f"{argv[0]} is not installed here: the Slurm backend runs Slurm's client commands "
                "(Debian: apt-get install slurm-client)"
            ) from None
        if done.returncode != 0:
            error = error_of(argv[0], done.returncode, done.stderr)
            if isinstance(error, Throttled):
                self.refused[argv[0]] = self.refused.get(argv[0], 0) + 1
            raise error
        out: str = done.stdout
        return out

    def submit(self, script: str, workdir: str | None = None) -> int:
        """Submit one batch script (on stdin); its job id."""
        argv = ["sbatch", "--parsable"] + ([f"--chdir={workdir}"] if workdir else [])
        out = self._run(argv, stdin=script).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise Invalid(f"sbatch: unexpected answer {out[:200]!r}") from None

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the controller knows (pending, running, and ended within MinJobAge)."""
        return self._listed(["squeue", "--json", "--all"], "jobs")

    def knows(self, prefix: str) -> bool:
        """Whether the controller knows any job (pending, running, or ended within
        MinJobAge) whose comment starts with `prefix`: a listing of the jobs' comments
        alone, a small part of what `jobs` costs where the controller remembers many jobs
        (Slurm 22.05's `squeue --json` lists every job of every user, whatever the filters).
        Its header is what says the job table was read (squeue prints it once it has)."""
        out = self._run(["squeue", "--all", "--states=all", "--format=%k"]).splitlines()
        if not out or out[0].strip() != "COMMENT":
            raise Unavailable(f"squeue: no listing of the controller's jobs in its answer {' '.join(out)[:200]!r}")
        return any(line.startswith(prefix) for line in out[1:])

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with its partitions, state and GRES in use (`sinfo --json`)."""
        return self._listed(["sinfo", "--json"], "nodes")

    def _listed(self, argv: list[str], key: str) -> list[dict[str, Any]]:
        """A `--json` listing, whole or not at all. A controller that does not answer makes
        squeue and sinfo exit 0 with an empty list and the failure under "errors" (Slurm
        22.05): taken at its word, every job of the study would look gone, and each be
        submitted again. So a listing that says errors is no listing: Unavailable."""
        out = self._run(argv)
        command = " ".join(argv[:2])
        try:
            answer = json.loads(out)
        except ValueError:
            raise Unavailable(f"{command}: not JSON: {out[:200]!r}") from None
        errors = answer.get("errors") if isinstance(answer, dict) else None
        if errors:
            said = "; ".join(
                str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e) for e in errors
            )
            raise Unavailable(f"{command}: the controller's answer says it failed ({said[:300]}): not a whole listing")
        listed = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(listed, list):
            raise Unavailable(f"{command}: no {key!r} in its answer")
        return listed

    def find(self, name: str) -> int | None:
        """The id of a job of this name the controller knows, if any (a job array's: its
        base id, `%F`): looked up before a submit whose answer was lost is sent again."""
        out = self._run(["squeue", "--all", "--noheader", "--format=%F", f"--name={name}"])
        ids = [int(x) for x in out.split() if x.isdigit()]
        return min(ids) if ids else None

    def listed(self, *selector: str) -> list[Listed]:
        """The jobs `selector` picks (squeue's `--me`, `--name=NAME`, `--jobs=ID`), ended ones
        the controller remembers included, oldest first; a job id it has forgotten is no
        job (squeue refuses it: "Invalid job id")."""
        argv = ["squeue", "--states=all", "--noheader", "--format=%i|%T|%r|%N", *selector]
        try:
            out = self._run(argv)
        except Invalid as exc:
            if "invalid job id" in str(exc).lower():
                return []
            raise
        rows = [line.split("|", 3) for line in out.splitlines() if line.count("|") >= 3]
        return sorted((Listed(int(r[0]), r[1], r[2], r[3]) for r in rows if r[0].isdigit()), key=lambda job: job.job)

    # a job is its id, a task of a job array `<array id>_<task>`

    def cancel(self, job: int | str) -> None:
        self._run(["scancel", str(job)])

    def hold(self, job: int | str) -> None:
        self._run(["scontrol", "hold", str(job)])

    def release(self, job: int | str) -> None:
        self._run(["scontrol", "release", str(job)])

    def requeue(self, job: int | str, hold: bool = False) -> None:
        self._run(["scontrol", "requeuehold" if hold else "requeue", str(job)])

    def max_array_size(self) -> int | None:
        """The controller's MaxArraySize (task ids of a job array are below it), None when
        `scontrol show config` does not say."""
        for line in self._run(["scontrol", "show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "MaxArraySize" and value.strip().isdigit():
                return int(value.strip())
        return None

    def throttle(self, array: int | str, tasks: int) -> None:
        """At most `tasks` of a job array's tasks running at once (ArrayTaskThrottle), from
        now on: running tasks are not stopped when it is lowered. scontrol exits 1 when some
        of the array's tasks have ended already ("Job has already finished"), while the
        update went through for the others ("No error"): that is success."""
        try:
            self._run(["scontrol", "update", f"JobId={array}", f"ArrayTaskThrottle={tasks}"])
        except Invalid as exc:
            if "No error" not in str(exc) and "already finished" not in str(exc):
                raise
