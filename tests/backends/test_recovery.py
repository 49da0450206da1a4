"""The recovery rules on each batch backend's real testbed (Slurm's daemons, a YARN
ResourceManager and its NodeManagers), as on Kubernetes: a trial preempted more often than
`retries.max_preemptions` is given up, failed with the reason Kubernetes gives, in the
loop's events and in `status`; its preemption is never a failure. Slurm requeues the
preempted job itself: giving up cancels it. YARN's gang AM ends the preempted attempt:
giving up submits no next one. The trials preemption spared succeed."""

from __future__ import annotations

import json
import re
import time

from tests.backends.test_submit import PREEMPT, study

GIVEN_UP = "given up, preempted once, more than retries.max_preemptions=0"


def test_a_trial_preempted_past_max_preemptions_is_given_up(backend, tmp_path):
    bed = backend.bed
    gpus, seconds = PREEMPT[backend.name]
    name = f"giveup-{int(time.time()) % 100000}"
    command = f'sleep {seconds}; echo \'{{"loss": 1}}\' > "$STRATCTL_OUTPUT_DIR/result.json"'
    path = study(backend, tmp_path, name, 4, command, gpus=gpus, inflight=4)  # four trials take every GPU
    path.write_text(path.read_text() + "retries: {max_preemptions: 0, max_failures: 2}\n")
    bed.wait_idle()
    loop = bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    bed.wait("every trial running", lambda: backend.running(name) == 4 and backend.full())
    backend.preempt(tmp_path, name)
    out, err = loop.communicate(timeout=240)
    progress = json.loads(out)
    given_up = sorted(set(re.findall(rf"trial (\S+): {GIVEN_UP}", err)))
    assert given_up, err[-3000:]  # the preempted trials, each given up at its first preemption
    assert loop.returncode == 1, err[-2000:]  # some trials failed
    assert progress["failed"] == len(given_up) and progress["succeeded"] == 4 - len(given_up), progress
    records = backend.records(name)
    for trial in given_up:
        attempts = records[trial]
        if backend.preemption == "requeue":  # the job Slurm requeued, cancelled: no other job
            assert len(attempts) == 1 and attempts[0]["restart_cnt"] == 1, attempts
            bed.wait(
                "the requeued job cancelled", lambda t=trial: backend.records(name)[t][0]["job_state"] == "CANCELLED"
            )
        else:  # the attempt the gang AM ended, preempted: no next one
            assert len(attempts) == 1 and "stratctl: preempted" in attempts[0]["diagnostics"], attempts
    for trial, attempts in records.items():
        if trial not in given_up:  # spared: ran once to its end
            assert [backend.state(a) for a in attempts] == [backend.done], attempts
    shown = bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path)
    rows = {r["trial"]: r for r in json.loads(shown.stdout)["trials"]}
    for trial in given_up:
        row = rows[trial]
        assert (row["state"], row["preemptions"], row["failed_attempts"]) == ("failed", 1, 0), row
        assert "preempted once, more than retries.max_preemptions=0" in row["reason"], row
    assert {rows[t]["state"] for t in rows if t not in given_up} == {"succeeded"}
    # a later run submits nothing for them: given up stays given up
    again = bed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert json.loads(again.stdout)["failed"] == len(given_up) and json.loads(again.stdout)["created"] == 0
    assert sum(map(len, backend.records(name).values())) == 4
