"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP, VOLCANO_JOB

GPU = "nvidia.com/gpu"


def wait_until(predicate, timeout: float, interval: float = 0.5, message: str = "condition"):
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


def unique(prefix: str) -> str:
    """A study or job name of this run, apart from earlier runs' (which may still be going away)."""
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def ctrl_c_as_in_a_terminal() -> None:
    """In a command the tests start: SIGINT does what Ctrl-C does in a terminal, even when
    the suite itself runs where SIGINT is ignored (a shell's background job: the command
    would inherit that, and a test's Ctrl-C would do nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Cli:
    """The CLI as separate processes, as a user runs it, pointed at the testbed: the
    kubeconfig in the environment (not on the command line), a chosen context (default: the
    admin) and the testbed's namespace.

    traceback: STRATCTL_TRACEBACK=1, so an error escaping a command shows where (off: the
    one-line messages and exit codes users see). columns: the terminal width rich sees
    (wide enough that a table cell is one line). stdin: e.g. subprocess.DEVNULL for a script
    without a terminal (so no confirmation prompt). timeout: the default of `run`/`call`.
    """

    def __init__(
        self,
        testbed,
        *,
        context: str | None = None,
        traceback: bool = True,
        columns: int | None = None,
        stdin=None,
        timeout: float = 60,
    ):
        self.tb = testbed
        self.context = context or testbed.admin_context
        self.stdin = stdin
        self.timeout = timeout
        self.env = {k: v for k, v in os.environ.items() if k != "STRATCTL_TRACEBACK"}
        self.env["KUBECONFIG"] = testbed.kubeconfig
        self.env["PYTHONFAULTHANDLER"] = "1"  # a command stuck past its test's wait says where (`interrupt`)
        if traceback:
            self.env["STRATCTL_TRACEBACK"] = "1"
        if columns:
            self.env["COLUMNS"] = str(columns)

    def args(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "stratctl", *args, "--context", self.context, "-n", self.tb.namespace]

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.args(*args),
            env=self.env,
            stdin=self.stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_as_in_a_terminal,
        )

    @staticmethod
    def interrupt(process: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
        """Ctrl-C a command and wait for it to end: its output. One that does not end in
        `timeout` fails the test with every thread's stack (SIGABRT: faulthandler's dump)."""
        process.send_signal(signal.SIGINT)
        try:
            return process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            out, err = process.communicate(timeout=30)
            raise AssertionError(f"still running {timeout:g}s after Ctrl-C; its threads:\n{err[-6000:]}") from None

    def call(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run to the end; the exit code is the caller's to check."""
        return subprocess.run(
            self.args(*args),
            env=self.env,
            stdin=self.stdin,
            capture_output=True,
            text=True,
            timeout=timeout or self.timeout,
        )

    def run(self, *args: str, code: int = 0, timeout: float | None = None) -> str:
        """Run to the end, assert the exit code, return stdout."""
        done = self.call(*args, timeout=timeout)
        assert done.returncode == code, (
            f"stratctl {' '.join(args)} exited {done.returncode}, not {code}:\n{done.stderr}"
        )
        return done.stdout

    def status(self, name: str) -> dict:
        return json.loads(self.run("status", name, "-o", "json"))


def finish(proc: subprocess.Popen, timeout: float) -> dict:
    """Wait for a `submit ... -o json` started with Cli.start: exit 0, its JSON summary."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"submit exited {proc.returncode}:\n{err[-3000:]}"
    return json.loads(out)


#: What a study leaves in the cluster, all labelled with its name.
STUDY_KINDS = (VOLCANO_JOB, BATCH_JOB, PODGROUP, POD, CONFIGMAP)


def of_study(api, kind, name: str) -> list[dict]:
    return api.list(kind, label_selector=f"{labels.STUDY}={name}")[0]


def delete_study(api, name: str) -> None:
    """Delete every object of a study by its label (jobs, PodGroups, pods, the record)."""
    for kind in STUDY_KINDS:
        for item in of_study(api, kind, name):
            api.delete(kind, item["metadata"]["name"])


def recorded(api, name: str) -> None:
    """Once `submit` has recorded the study (status knows it)."""
    wait_until(lambda: of_study(api, CONFIGMAP, name), 60, message=f"the study record of {name}")


def running_pods(api, selector: str) -> list[dict]:
    pods, _ = api.list(POD, label_selector=selector)
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def env_of(job: dict) -> dict:
    """The environment of a Volcano job's first container."""
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def fake_study(
    name: str,
    namespace: str,
    trials: int,
    duration: str,
    *,
    replicas: int = 1,
    min_available: int | None = None,
    tasks: str | None = None,
    parallelism: int | None = None,
    min_parallelism: int = 1,
    annotations: dict | None = None,
    fields: dict | None = None,
    checkpoint: bool = True,
    extra: str = "",
) -> str:
    """A study of `trials` grid trials (seed 0..trials-1) of the fake trial image, whose pods
    the testbed's KWOK runs for `duration` (more testbed.stratctl.io/ behaviour in
    `annotations`): one task of `replicas` one-GPU pods (gang `min_available`) unless `tasks`
    gives the task list; at most `parallelism` (default: all) trials in flight; `fields`
    are top-level fields after priority_class; `extra` is YAML appended at the end."""
    gang = f", min_available: {min_available}" if min_available else ""
    cap = parallelism or trials
    notes = ", ".join(
        f"{key}: {json.dumps(value)}"
        for key, value in {"testbed.stratctl.io/run-duration": duration, **(annotations or {})}.items()
    )
    head = "".join(f"{key}: {value}\n" for key, value in (fields or {}).items())
    store = 'checkpoint: {location: "/ckpt/{{ study }}/{{ trial }}"}\n' if checkpoint else ""
    return (
        f"name: {name}\n"
        f"namespace: {namespace}\n"
        "priority_class: stratctl-low\n"
        f"{head}"
        "space:\n"
        f"  seed: {{type: int, low: 0, high: {trials - 1}}}\n"
        "strategy: {kind: grid}\n"
        "trial:\n"
        "  image: stratctl.invalid/fake-trial:0\n"
        f"  annotations: {{{notes}}}\n"
        f"  resources: {{requests: {{{GPU}: 1, cpu: 100m}}, limits: {{{GPU}: 1}}}}\n"
        f"  tasks: {tasks or f'[{{name: worker, replicas: {replicas}{gang}}}]'}\n"
        f"{store}"
        f"throttle: {{qps: 50, burst: 20, parallelism: {{min: {min_parallelism}, initial: {cap}, max: {cap}}}}}\n"
    ) + textwrap.dedent(extra)


def busybox_study(
    name: str,
    namespace: str,
    trials: int,
    duration: str = "2s",
    *,
    cap: int | None = None,
    replicas: int = 1,
    image: str = "busybox",
    flag: str = "--seed",
    throttle: str | None = None,
    extra: str = "",
) -> str:
    """A study of `trials` grid trials in the default queue, each a `train {flag}=<seed>`
    command in `image` on one task of `replicas` one-GPU pods, which the testbed's KWOK runs
    for `duration`; at most `cap` (default: all) in flight, or the `throttle` given."""
    cap = cap or trials
    throttle = throttle or f"{{qps: 50, burst: 20, parallelism: {{min: 1, initial: {cap}, max: {cap}}}}}"
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          image: {image}
          command: ["train", "{flag}={{{{ params.seed }}}}"]
          annotations:
            testbed.stratctl.io/run-duration: "{duration}"
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: {replicas}}}]
        throttle: {throttle}
        """) + textwrap.dedent(extra)


def high_priority_gang(api, namespace, name, pods=8):
    """A production gang of `pods` one-GPU pods at the stratctl-high priority, running 5 s."""
    api.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulerName": "volcano",
                "queue": "default",
                "minAvailable": pods,
                "maxRetry": 1,
                "priorityClassName": "stratctl-high",
                "tasks": [
                    {
                        "name": "serve",
                        "replicas": pods,
                        "minAvailable": pods,
                        "template": {
                            "metadata": {"annotations": {"testbed.stratctl.io/run-duration": "5s"}},
                            "spec": {
                                "schedulerName": "volcano",
                                "restartPolicy": "Never",
                                "priorityClassName": "stratctl-high",
                                "containers": [
                                    {
                                        "name": "serve",
                                        "image": "stratctl.invalid/prod:0",
                                        "resources": {
                                            "requests": {"nvidia.com/gpu": "1", "cpu": "100m"},
                                            "limits": {"nvidia.com/gpu": "1"},
                                        },
                                    }
                                ],
                            },
                        },
                    }
                ],
            },
        }
    )


class StratctlRuns:
    """`stratctl` run as a process in a testbed's environment (`env`: what its env file
    exports), for the tests of a batch-scheduler backend."""

    env: dict[str, str]

    def stratctl(self, *args: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "stratctl", *args],
            cwd=cwd,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str, cwd) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "stratctl", *args],
            cwd=cwd,
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, what: str, condition, timeout: float = 90.0):
        return wait_until(condition, timeout, message=what)


def testbed_up(script) -> dict[str, str]:
    """Run a testbed's up.sh (idempotent) and return what its env file exports (the file
    is the last line it prints)."""
    out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, text=True).stdout
    env = {}
    with open(out.strip().splitlines()[-1]) as env_file:
        for line in env_file.read().splitlines():
            if line.startswith("export ") and "=" in line:
                key, value = line[len("export ") :].split("=", 1)
                env[key] = value
    return env


class ReportingTrials:
    """Plays the trials' part of a study with a pruner (KWOK pods run no code): every running
    pod of the study reports the next step of its learning curve (`value`) through `stratctl
    report` as a process, about every 1.5 s, its history in a file of its own (a container's
    /tmp), `steps` steps in all; `first` is called at a pod's first step. (A pod's
    run-duration counts from its start: it must cover the reports.)"""

    def __init__(self, testbed, api, study: str, tmp, steps: int):
        self.testbed, self.api, self.study, self.tmp, self.reported = testbed, api, study, tmp, steps
        self.steps: dict[str, int] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def value(self, pod: dict, step: int) -> float:
        raise NotImplementedError

    def first(self, pod: dict) -> None:
        """A pod's first step is due."""

    def _run(self) -> None:
        while not self.stop.is_set():
            for pod in running_pods(self.api, f"{labels.STUDY}={self.study}"):
                name = pod["metadata"]["name"]
                step = self.steps.get(name, 0)
                if step >= self.reported:
                    continue
                if step == 0:
                    self.first(pod)
                done = subprocess.run(
                    [sys.executable, "-m", "stratctl", "report", "--step", str(step)]
                    + [f"loss={self.value(pod, step):.6f}", "--flush", "--pod", name, "-n", self.testbed.namespace]
                    + ["--kubeconfig", self.testbed.kubeconfig, "--context", self.testbed.admin_context],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "STRATCTL_REPORT_FILE": str(self.tmp / name)},
                )
                if done.returncode != 0 and "not found" not in done.stderr:  # a pod pruned meanwhile is gone
                    self.errors.append(done.stderr)
                self.steps[name] = step + 1
            self.stop.wait(1.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
