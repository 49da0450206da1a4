"""A closed-loop search's view of YARN on its real testbed, no shared filesystem assumed:
a trial's result reaches `Scheduler.result` from the ResourceManager (the gang AM's final
diagnostics; the result file deleted first), a running trial's reports are read through
the RM's web proxy from the gang AM, and `prune` kills it: the trial sees SIGTERM."""

from __future__ import annotations

import time
from pathlib import Path

from stratctl.backends.yarn.scheduler import YarnScheduler
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.trialstate import TrialState
from tests.backends.testbeds import REPO

PROGRAM = """\
import os, signal, sys, time
from pathlib import Path
from stratctl import trial

out = Path(os.environ["STRATCTL_OUTPUT_DIR"])
def stopped(*_):
    (out / "sigterm").write_text("SIGTERM\\n")
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
seed = int(trial.params()["seed"])
for step in range(1, 10_000):
    trial.report(step, loss=1.0 / step + seed)
    if seed == 0 and step == 3:
        trial.result(loss=0.333, steps=step)
        break
    time.sleep(0.2)
"""

STUDY = """\
name: {name}
backend: yarn
yarn: {{resource_managers: ["{rm}"], queue: research}}
space:
  seed: {{type: int, low: 0, high: 1, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["python3", "{program}"]
  env: {{PYTHONPATH: "{repo}"}}
  resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: 1}}}}
"""


def test_result_from_the_rm_reports_through_the_proxy_and_prune_sends_sigterm(yarn, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    name = f"search-{int(time.time()) % 100000}"
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(name=name, rm=yarn.rm, program=program, repo=REPO))
    study = load_study(str(path))
    sched = YarnScheduler(study, workdir=str(tmp_path), jar=_jar(yarn))
    done, running = expand(study)  # seed 0 posts a result at step 3; seed 1 reports until pruned
    for one in (done, running):
        sched.create(sched.prepare(one, 0))

    def seen(trial, state):
        return lambda: (a := sched.attempts().get(trial)) is not None and a.state is state and a

    ended = yarn.wait("the first trial succeeded", seen(done.name, TrialState.SUCCEEDED), timeout=40)
    (sched.output / done.name / "result.json").unlink()  # not what is read: the RM's diagnostics are
    assert sched.result(done.name) == {"loss": 0.333, "steps": 3}, ended
    [app] = [a for a in yarn.apps(name) if a["id"] == ended.job]
    assert app["diagnostics"] == 'stratctl: 1 tasks succeeded\nstratctl: result {"loss":0.333,"steps":3}'

    attempt = yarn.wait("the second trial runs", seen(running.name, TrialState.RUNNING), timeout=20)
    reports = yarn.wait("3 reports through the proxy", lambda: len(r := sched.reports(attempt, "loss")) >= 3 and r)
    assert all(reports[step] == 1.0 / step + 1 for step in reports)
    took = []
    for _ in range(5):
        start = time.perf_counter()
        sched.reports(attempt, "loss")
        took.append(time.perf_counter() - start)
    print(f"a report read through the RM's web proxy: {min(took) * 1000:.1f}-{max(took) * 1000:.1f} ms")
    assert max(took) < 1.0

    sched.prune(attempt)
    pruned = yarn.wait("the pruned trial ended", seen(running.name, TrialState.FAILED), timeout=20)
    assert pruned.native_state == "KILLED" and not pruned.state.in_flight
    # the trial saw SIGTERM (its handler runs a moment after the RM already says KILLED)
    sigterm = sched.output / running.name / "sigterm"
    assert (
        yarn.wait("the trial's SIGTERM handler", lambda: sigterm.is_file() and sigterm.read_text(), 10) == "SIGTERM\n"
    )
    assert sched.result(running.name) is None and sched.reports(pruned, "loss") == {}


def _jar(yarn):
    return Path(yarn.env["STRATCTL_YARN_AM_JAR"]) if yarn.env.get("STRATCTL_YARN_AM_JAR") else None
