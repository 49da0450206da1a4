"""Each backend's fake, at the boundary where the backend meets its scheduler, for the
contract suite (test_scheduler_contract.py) and the backend-specific tests:

- `FakeSlurm`: Slurm's commands (sbatch, squeue, sinfo, scontrol) as a `run` for
  `commands.Slurm`, jobs kept in memory; the job script's own files (its marks) are what a
  test writes when it ends a job.
- `FakeRM`: a YARN ResourceManager's REST API as a urllib3 pool for `rest.ResourceManager`,
  applications kept in memory: the real client sends its requests and counts them.
- `MemoryScheduler`: a scheduler held in a dict, that is neither (the seam itself).

Each fake can lose the answer of its next create (it goes through, the caller hears a
timeout) and refuse its next create for a submit limit."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import urllib3

from stratctl.attempt import Attempt
from stratctl.errors import Throttled, Unavailable
from stratctl.trialstate import TrialState

# -- Slurm ----------------------------------------------------------------------------------


class FakeSlurm:
    """A controller that keeps jobs in memory; `sbatch_answers` scripts sbatch's answers:
    "ok", "lost" (the job is created, sbatch times out), "timeout" (not created, sbatch
    times out), "limit" (refused for a submit limit)."""

    def __init__(self, sbatch_answers=(), nodes=(), max_array=1001):
        self.jobs: list[dict] = []
        self.sbatch_answers = list(sbatch_answers)
        self.sent: list[str] = []
        self.scripts: list[str] = []  # what each sbatch was given
        self.nodes: list[dict] = list(nodes)
        self.commands: list[list[str]] = []  # every command run, as its argv
        self.max_array = max_array  # MaxArraySize, as `scontrol show config` says it

    def job(self, job_id) -> dict:
        return next(j for j in self.jobs if j["job_id"] == int(job_id))

    def __call__(self, argv, input=None, **_):
        self.commands.append(list(argv))
        if argv[0] == "sbatch":
            comment = next(  # none: a study's driver job (backends/slurm/driver.py)
                (line.split("=", 1)[1] for line in input.splitlines() if line.startswith("#SBATCH --comment=")), None
            )
            name = next(line.split("=", 1)[1] for line in input.splitlines() if line.startswith("#SBATCH --job-name="))
            answer = self.sbatch_answers.pop(0) if self.sbatch_answers else "ok"
            self.sent.append(name)
            self.scripts.append(input)
            if answer == "limit":
                return subprocess.CompletedProcess(
                    argv,
                    1,
                    "",
                    "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: "
                    "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
                )
            if answer in ("ok", "lost"):
                job = {
                    "job_id": len(self.jobs) + 1,
                    "name": name,
                    "comment": comment,
                    "job_state": "PENDING",
                    "state_reason": "Priority",
                    "priority": 1,
                    "restart_cnt": 0,
                }
                array = [line.split("=", 1)[1] for line in input.splitlines() if line.startswith("#SBATCH --array=")]
                if array:  # a job array: its one pending record, tasks split off as they start (`start`)
                    tasks, throttle = array[0].split("%")
                    job.update(
                        array_job_id=job["job_id"],
                        array_task_string=array[0],
                        array_max_tasks=int(throttle),
                        state_reason="JobArrayTaskLimit",
                    )
                self.jobs.append(job)
            if answer == "ok":
                return subprocess.CompletedProcess(argv, 0, f"{len(self.jobs)}\n", "")
            return subprocess.CompletedProcess(
                argv, 1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
            )
        if argv[0] == "squeue" and "--json" in argv:
            return subprocess.CompletedProcess(argv, 0, json.dumps({"jobs": self.jobs}), "")
        if argv[0] == "squeue" and "--format=%k" in argv:  # the jobs' comments, under squeue's header
            return subprocess.CompletedProcess(
                argv, 0, "COMMENT\n" + "".join(f"{j.get('comment') or '(null)'}\n" for j in self.jobs), ""
            )
        if argv[0] == "squeue" and "--format=%i|%T|%r|%N" in argv:  # Slurm.listed: by --name or --jobs
            picked = self.jobs
            for option in argv:
                key, _, value = option.partition("=")
                if key == "--name":
                    picked = [j for j in picked if j["name"] == value]
                elif key == "--jobs":
                    picked = [j for j in picked if j["job_id"] == int(value)]
                    if not picked:
                        return subprocess.CompletedProcess(
                            argv, 1, "", "slurm_load_jobs error: Invalid job id specified"
                        )
            rows = (f"{j['job_id']}|{j['job_state']}|{j['state_reason']}|{j.get('nodes', '')}\n" for j in picked)
            return subprocess.CompletedProcess(argv, 0, "".join(rows), "")
        if argv[0] == "squeue":  # find by name
            name = argv[-1].split("=", 1)[1]
            return subprocess.CompletedProcess(
                argv, 0, "".join(f"{j['job_id']}\n" for j in self.jobs if j["name"] == name), ""
            )
        if argv[0] == "sinfo":
            return subprocess.CompletedProcess(argv, 0, json.dumps({"nodes": self.nodes}), "")
        if argv[0] == "scancel":
            self.job(argv[1]).update(job_state="CANCELLED", state_reason="None")
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "scontrol" and argv[1] == "show":
            return subprocess.CompletedProcess(argv, 0, f"MaxArraySize            = {self.max_array}\n", "")
        if argv[0] == "scontrol" and argv[1] == "update":  # scontrol update JobId=N ArrayTaskThrottle=K
            job = self.job(argv[2].split("=")[1])
            throttle = int(argv[3].split("=")[1])
            job.update(
                array_max_tasks=throttle, array_task_string=f"{job['array_task_string'].split('%')[0]}%{throttle}"
            )
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "scontrol":
            job = self.job(argv[2])
            if argv[1] == "hold":
                job.update(priority=0, state_reason="JobHeldUser")
            elif argv[1] == "requeuehold":  # a running job: back in the queue, held; Slurm counts a restart
                job.update(
                    job_state="PENDING", priority=0, state_reason="JobHeldUser", restart_cnt=job["restart_cnt"] + 1
                )
            elif argv[1] == "release":
                job.update(priority=1, state_reason="Priority")
            else:
                raise AssertionError(argv)
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(argv)


def start_task(fake: FakeSlurm, array: int, index: int) -> dict:
    """Slurm starts task `index` of job array `array`: its own record (its own job id),
    split off the array's pending remainder."""
    meta = fake.job(array)
    ids = [int(x) for part in meta["array_task_string"].split("%")[0].split(",") for x in _span(part)]
    rest = [i for i in ids if i != index]
    task = {**meta, "job_id": 1000 + len(fake.jobs), "array_task_id": index, "array_task_string": ""}
    task.update(job_state="RUNNING", state_reason="None")
    meta["array_task_string"] = ",".join(map(str, rest)) + f"%{meta['array_max_tasks']}"
    fake.jobs.append(task)
    return task


def _span(text: str) -> list[str]:
    first, _, last = text.partition("-")
    return [str(i) for i in range(int(first), int(last or first) + 1)]


def slurm_nodes(free: list[int]) -> list[dict]:
    """sinfo's nodes, 4 GPUs each, `free` of them free."""
    return [
        {"name": f"sn{i}", "partitions": ["research"], "state": "IDLE", "gres": "gpu:4", "gres_used": f"gpu:{4 - n}"}
        for i, n in enumerate(free)
    ]


# -- YARN -----------------------------------------------------------------------------------


class _Answer:
    def __init__(self, status=200, body=None, headers=None):
        self.status = status
        self.data = json.dumps(body).encode() if body is not None else b""
        self.headers = headers or {}


class FakeRM:
    """A ResourceManager's REST API as a urllib3 pool: applications in `apps` (id -> the RM's
    JSON of it), nodes in `nodes`. `submit_answers` scripts the submissions: "ok", "lost"
    (accepted, the answer never comes), "limit" (HTTP 429)."""

    def __init__(self, submit_answers=()):
        self.apps: dict[str, dict] = {}
        self.nodes: list[dict] = []
        self.queues: list[dict] = []
        self.submit_answers = list(submit_answers)
        self.submitted: list[dict] = []  # each submission's body, as sent
        self.killed: list[str] = []
        self.moved: list[tuple[str, str]] = []  # (application, queue) of each move
        self._next = 0

    def request(self, method, url, body=None, headers=None, redirect=True):
        parts = urlsplit(url)
        path, query = parts.path.removeprefix("/ws/v1/cluster"), parse_qs(parts.query)
        if (method, path) == ("POST", "/apps/new-application"):
            self._next += 1
            return _Answer(200, {"application-id": f"application_1_{self._next:04d}"})
        if (method, path) == ("POST", "/apps"):
            answer = self.submit_answers.pop(0) if self.submit_answers else "ok"
            if answer == "limit":
                return _Answer(429, {"RemoteException": {"message": "too many submissions"}}, {"Retry-After": "1"})
            submitted = json.loads(body)
            self.submitted.append(submitted)
            self.apps[submitted["application-id"]] = {
                "id": submitted["application-id"],
                "queue": submitted["queue"],
                "state": "ACCEPTED",
                "finalStatus": "UNDEFINED",
                "progress": 0.0,
                "applicationTags": ",".join(submitted["application-tags"]["tag"]),
                "diagnostics": "[Sun Dec 06 00:00:00 +0000 2026] Application is added to the scheduler",
                "launchTime": 0,
                "finishedTime": 0,
            }
            if answer == "lost":
                raise urllib3.exceptions.ReadTimeoutError(None, url, "Read timed out. (read timeout=10.0)")
            return _Answer(202)
        if (method, path) == ("GET", "/apps"):
            tag = query["applicationTags"][0]
            return _Answer(200, {"apps": {"app": [a for a in self.apps.values() if tag in self.tags(a)]}})
        if method == "PUT" and path.startswith("/apps/") and path.endswith("/state"):
            app_id = path.split("/")[2]
            self.killed.append(app_id)
            self.end(app_id, "KILLED", "KILLED", diagnostics="Application killed by user.")
            return _Answer(200, {"state": "KILLED"})
        if method == "PUT" and path.startswith("/apps/") and path.endswith("/queue"):
            app_id = path.split("/")[2]
            self.moved.append((app_id, json.loads(body)["queue"]))
            self.apps[app_id]["queue"] = "root." + json.loads(body)["queue"]  # as the RM names it once moved
            return _Answer(200, json.loads(body))
        if (method, path) == ("GET", "/nodes"):
            return _Answer(200, {"nodes": {"node": self.nodes}})
        if (method, path) == ("GET", "/scheduler"):
            return _Answer(200, {"scheduler": {"schedulerInfo": {"queues": {"queue": self.queues}}}})
        raise AssertionError((method, url))

    @staticmethod
    def tags(app: dict) -> list[str]:
        return app["applicationTags"].split(",")

    def of(self, trial: str) -> list[dict]:
        """The trial's applications, oldest first."""
        return [a for a in self.apps.values() if f"stratctl-trial:{trial}" in self.tags(a)]

    def end(self, app_id: str, state: str, final: str, diagnostics: str = "", launched: int = 1_000_000) -> None:
        app = self.apps[app_id]
        app.update(
            state=state,
            finalStatus=final,
            diagnostics=diagnostics,
            progress=100.0,
            launchTime=app["launchTime"] or launched,
            finishedTime=launched + 3_000_000,  # ms: 1000 s to 4000 s
        )


def yarn_nodes(free: list[int]) -> list[dict]:
    """The RM's RUNNING nodes, `free` GPUs free on each."""
    return [
        {
            "id": f"nm{i}:8041",
            "state": "RUNNING",
            "availableResource": {
                "resourceInformations": {"resourceInformation": [{"name": "yarn.io/gpu", "value": n}]}
            },
        }
        for i, n in enumerate(free)
    ]


# -- a scheduler that is neither ---------------------------------------------------------------


class MemoryScheduler:
    """A scheduler held in a dict: trial -> its latest Attempt (`jobs`, what its controller
    lists; an ended one is also kept in `kept`, listed with marks once the controller
    forgets it). `answers` scripts the creates, as FakeSlurm's sbatch: "ok", "lost" (it
    goes through, the caller hears a timeout), "limit" (refused for its quota)."""

    kind, title, create_command, limit_words = "memory", "Memory", "put", "quota"
    controller, calls_word = "Memory controller", "calls"
    where, queue = "memory:q", "q"

    def __init__(self, gpus=(4, 4)):
        self.jobs: dict[str, Attempt] = {}
        self.kept: dict[str, Attempt] = {}
        self.gpus = list(gpus)
        self.answers: list[str] = []
        self.calls, self.sent, self.refused = 0, {}, {}
        self.flag = False
        self.gave_up: dict[str, str] = {}
        self.results: dict[str, dict] = {}
        self.creates: list[tuple[str, int]] = []

    def _count(self, what):
        self.calls += 1
        self.sent[what] = self.sent.get(what, 0) + 1

    def attempts(self, marks=True):
        self._count("list")
        for trial, attempt in self.jobs.items():
            if attempt.state.finished or attempt.state is TrialState.PREEMPTED:
                self.kept[trial] = attempt
        seen = dict(self.kept) if marks else {}
        seen.update(self.jobs)
        return seen

    def free_gpus(self):
        self._count("capacity")
        return list(self.gpus)

    def result(self, trial):
        return self.results.get(trial)

    def prepare(self, trial, number):
        return (trial.name, number)

    def check(self, trial):
        pass

    def create(self, prepared):
        trial, number = prepared
        self._count("put")
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer == "limit":
            self.refused["put"] = self.refused.get("put", 0) + 1
            raise Throttled("put: over quota", status=429)
        self.creates.append(prepared)
        earlier = self.jobs.get(trial) or self.kept.get(trial)
        self.jobs[trial] = Attempt(
            trial,
            number,
            TrialState.PENDING,
            job=f"{trial}-{number}",
            native_state="QUEUED",
            reason="Resources",
            waits_for_capacity=True,
            failures_before=None if earlier is None else earlier.failures + (earlier.state is TrialState.FAILED),
            preempted_before=0 if earlier is None else earlier.preemptions,
        )
        if answer == "lost":
            raise Unavailable("put: no answer")

    def find(self, prepared):
        self._count("get")
        trial, number = prepared
        return trial in self.jobs and self.jobs[trial].attempt == number

    def set(self, trial, **changes):
        self.jobs[trial] = replace(self.jobs[trial], **changes)

    def hold(self, attempt):
        self.set(attempt.trial, state=TrialState.SUSPENDED, native_state="HELD")

    def stop(self, attempt):  # drain's stop: no restart of the attempt's own (no preemption)
        self.set(attempt.trial, state=TrialState.SUSPENDED, native_state="HELD")

    def release(self, attempt):
        self.set(attempt.trial, state=TrialState.PENDING, native_state="QUEUED")

    def give_up(self, attempt, reason):
        self.gave_up[attempt.trial] = reason
        if attempt.state.in_flight:
            self.set(attempt.trial, state=TrialState.FAILED, native_state="CANCELLED")

    def given_up(self):
        return dict(self.gave_up)

    def drained(self):
        return self.flag

    def set_drained(self, on):
        self.flag = on

    def driver_gone(self, holder):  # a loop where submit runs: dead once its process is
        from stratctl.run.driver import gone

        return gone(holder)

    def driver(self):
        return None

    def stop_driver(self):
        return []
