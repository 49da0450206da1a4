"""Closed-loop search on the real testbeds (backends/batch/search.py): the trials run
examples/search/bowl.py, which reports its loss step by step (stratctl.trial.report) and
ends with its result, on a 2-D bowl whose minimum is 0 at (1, -2).

- A TPE search of 30 trials beats random search's median at the same budget, over 3 seeds
  each; one TPE run is SIGKILLed mid-search and run again: no trial is asked twice and the
  budget holds (each trial one attempt, 30 in all). The studies run side by side.
- A median-pruner study prunes at least one trial: recorded `pruned` (and mirrored so into
  an Optuna journal, `--storage`), its job ended
  (cancelled, killed) while its steps were still to come. It is merged (`merge: auto`): on
  Slurm the trials asked in one cycle go as one job array, and the pruner cancels one task.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from pathlib import Path

import pytest

from stratctl.core.space import expand
from stratctl.core.spec import load_study
from tests.backends.testbeds import REPO

EXAMPLE = REPO / "examples" / "search" / "bowl.py"

STUDY = """\
name: {name}
merge: {merge}
{header}space:
  x: {{type: uniform, low: -10.0, high: 10.0}}
  y: {{type: uniform, low: -10.0, high: 10.0}}
strategy: {{kind: {kind}, trials: {trials}, seed: {seed}}}
objective: {{metric: loss, direction: minimize}}
{pruner}throttle: {{parallelism: {{min: 1, initial: {cap}, max: {cap}}}}}
trial:
  command: ["python3", "{example}", "--x={{{{ params.x }}}}", "--y={{{{ params.y }}}}", "--steps={steps}",
            "--step-seconds=0.5"]
  env: {{PYTHONPATH: "{repo}"}}
  resources: {{{requests}limits: {{nvidia.com/gpu: 1}}}}
"""


def study(
    backend, tmp_path: Path, name: str, kind: str, seed: int, trials: int, cap: int, steps=0, pruner="", merge="off"
) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        STUDY.format(
            name=name,
            merge=merge,
            header=backend.header(),
            kind=kind,
            trials=trials,
            seed=seed,
            cap=cap,
            steps=steps,
            pruner=pruner,
            example=EXAMPLE,
            repo=REPO,
            requests=backend.requests,
        )
    )
    return path


def best(bed, path: Path, cwd: Path) -> tuple[float, list[dict]]:
    rows = json.loads(bed.stratctl("status", str(path), "-o", "json", cwd=cwd).stdout)["trials"]
    losses = [r["result"]["loss"] for r in rows if r["state"] == "succeeded"]
    return min(losses), rows


def bowl(params) -> float:
    return (float(params["x"]) - 1) ** 2 + (float(params["y"]) + 2) ** 2


@pytest.mark.parametrize("backend", ["slurm", "yarn"], indirect=True)
def test_tpe_beats_random_over_3_seeds_and_a_killed_search_asks_no_trial_twice(backend, tmp_path):
    """Random search's trials are known up front (`expand`) and the bowl is deterministic, so
    its best of 30 is computed here; on Slurm each random study also runs, and its measured
    best is that number (YARN, whose every application starts a JVM on this 2-core machine,
    runs the TPE studies only: 3 minutes less)."""
    bed, stamp = backend.bed, int(time.time()) % 100000
    runs = {}
    for kind in ("tpe", "random"):
        for seed in (1, 2, 3):
            name = f"bowl-{kind}{seed}-{stamp}"
            runs[name] = study(backend, tmp_path, name, kind, seed, trials=30, cap=2)
    computed = {n: min(bowl(t.params) for t in expand(load_study(p))) for n, p in runs.items() if "-random" in n}
    running = {n: p for n, p in runs.items() if "-tpe" in n or backend.name == "slurm"}
    killed = f"bowl-tpe1-{stamp}"
    procs = {
        name: bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
        for name, path in running.items()
    }
    asked = tmp_path / "stratctl-out" / killed / "search-asked.jsonl"
    bed.wait("a third of the killed search asked", lambda: len(_lines(asked)) >= 10, timeout=120)
    procs[killed].send_signal(signal.SIGKILL)
    procs[killed].wait(10)
    before = len(_lines(asked))
    procs[killed] = bed.start("submit", str(runs[killed]), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        progress = json.loads(out)
        assert progress["succeeded"] == 30 and progress["total"] == 30, (name, progress)
    again = _lines(asked)
    names = [json.loads(line)["name"] for line in again]
    assert len(names) == len(set(names)) == 30 and before <= 30  # each asked once, the budget held
    records = backend.records(killed)  # each trial one attempt: none sent twice across the kill
    assert sorted(records) == sorted(names) and all(len(jobs) == 1 for jobs in records.values())
    found = {name: best(bed, path, tmp_path)[0] for name, path in running.items()}
    for name in set(found) & set(computed):  # random, run for real: what was computed
        assert found[name] == pytest.approx(computed[name], abs=1e-9), name
    tpe = sorted(v for n, v in found.items() if "-tpe" in n)
    rand = sorted(computed.values())
    print(f"{backend.name}: best loss of 30 trials: tpe {tpe}, random {rand}")
    assert statistics.median(tpe) < statistics.median(rand), (tpe, rand)


@pytest.mark.parametrize("backend", ["slurm", "yarn"], indirect=True)
def test_a_median_pruner_stops_trials_that_fall_behind_and_their_processes_end(backend, tmp_path):
    bed, name = backend.bed, f"bowl-prune-{int(time.time()) % 100000}"
    path = study(
        backend,
        tmp_path,
        name,
        "tpe",
        seed=4,
        trials=10,
        cap=3,
        steps=6,
        pruner="pruner: {kind: median, startup_trials: 2, warmup_steps: 1}\n",
        merge="auto",
    )
    mirror = tmp_path / "search.log"
    done = bed.stratctl(
        "submit", str(path), "--poll-interval", "0.5", "-o", "json", "--storage", f"journal:{mirror}", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["pruned"] >= 1 and progress["succeeded"] + progress["pruned"] == 10, progress
    import optuna  # --storage: the search mirrored into an Optuna storage, each trial once
    from optuna.storages.journal import JournalFileBackend

    mirrored = optuna.load_study(
        study_name=name, storage=optuna.storages.JournalStorage(JournalFileBackend(str(mirror)))
    )
    states = [t.state.name for t in mirrored.get_trials()]
    assert len(states) == 10 and states.count("PRUNED") == progress["pruned"], states
    assert "pruned at step" in done.stderr
    _, rows = best(bed, path, tmp_path)
    pruned = [r for r in rows if r["state"] == "pruned"]
    assert len(pruned) == progress["pruned"]
    # judged at its last step (5), a trial may finish in the moment before its stop lands (seen on
    # YARN under load): still pruned, as the pruner said; those judged earlier show the stop itself
    early = [r for r in pruned if r["result"]["step"] < 5]
    assert early, pruned
    for row in early:
        log = bed.stratctl("logs", str(path), row["trial"], cwd=tmp_path).stdout
        assert "step 0:" in log and "done: loss" not in log and "step 5:" not in log, log[-1000:]  # it ended there
    assert {r["phase"] for r in early} == {backend.stopped}, early  # its job ended by the stop
    if backend.name == "slurm":  # merged: the asked trials went as job arrays
        assert "submitted as one job array" in done.stderr


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []
