"""What `stratctl status` prints: a terminal at 80 and 120 columns, a pipe, wide, names,
CSV, JSON; the study row agrees with the trial rows; the command's usage errors."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from stratctl.backends.kubernetes.objects.record import StudyRecord
from stratctl.backends.kubernetes.objects.state import timestamp
from stratctl.backends.kubernetes.objects.summary import study_row, summary_data
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.cli.main import app
from stratctl.errors import ExitCode, UsageError
from stratctl.run.ranking import sort_trials
from stratctl.run.rows import Snapshot, StudyRow, TrialRow
from stratctl.view import statusout
from stratctl.view.columns import duration, plural, study_note
from tests.unit import recorded
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make

GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("STRATCTL_UPDATE_GOLDEN") == "1"  # regenerate: STRATCTL_UPDATE_GOLDEN=1 pytest ...
NOW = timestamp("2025-05-01T12:00:00Z")
STUDY = "resnet50-lr-sweep"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"golden file {path} is missing; write it with STRATCTL_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} changed; if intended, rerun with STRATCTL_UPDATE_GOLDEN=1"


def trials() -> list[TrialRow]:
    def row(i, state, lr, batch, *, result=None, created=None, started=None, finished=None, **more):
        at = lambda minutes: None if minutes is None else NOW - minutes * 60  # noqa: E731
        return TrialRow(
            STUDY,
            f"{STUDY}-{'3f2a9c01d4e5f6a7b8c9'[i : i + 8]}",
            state,
            more.pop("attempt", 0),
            params={"lr": lr, "batch_size": batch},
            result=result,
            created=at(created),
            started=at(started),
            finished=at(finished),
            index=i,
            job=f"{STUDY}-{i}",
            **more,
        )

    return [
        row(
            0,
            "succeeded",
            0.1,
            32,
            result={"loss": 0.23134, "accuracy": 0.912},
            created=255,
            started=251,
            finished=0.5,
            gpu_seconds=4 * 15030,
        ),
        row(
            1,
            "failed",
            0.01,
            64,
            attempt=1,
            failures=2,
            exit_code=3,
            created=30,
            started=29,
            finished=20,
            reason="Error; failed 2 times, more than retries.max_failures=1",
        ),
        row(2, "running", 0.001, 32, created=6, started=5, preemptions=1),
        row(3, "pending", 0.0001, 64, created=2, pending="0/6 nodes are available: 6 Insufficient nvidia.com/gpu"),
        row(4, "succeeded", 1e-05, 32, result={"loss": 0.4, "accuracy": 0.88}, created=90, started=88, finished=61),
    ]


def snapshot(rows=None, trials_total=8) -> Snapshot:
    rows = trials() if rows is None else rows
    record = StudyRecord(study=STUDY, spec_hash="h", trials=trials_total, target=2, reason="adaptive: target 2")
    return Snapshot("ml-team", NOW, [study_row(record, rows, NOW)], rows)


def terminal(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_tables_at_80_and_120_columns(width):
    out = terminal(statusout.picture(snapshot(), True, width), width)
    _golden(f"status-{width}.txt", out)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width  # nothing wraps
    for row in trials():
        assert row.trial in out  # the trial name is never cut
    assert "lr" in lines[lines.index(next(line for line in lines if line.startswith("trial")))]
    assert "0.2313" in out and "0.912" in out  # a metric per column, 4 significant digits
    assert "exit 3: Error;" in out  # a failed trial says its exit code and why, in a column or under the table


def test_at_80_columns_the_columns_that_do_not_fit_are_named_not_cut():
    out = terminal(statusout.picture(snapshot(), True, 80), 80)
    assert "not shown: attempt, age, duration" in out
    wide = terminal(statusout.picture(snapshot(), True, 120), 120)
    assert "duration" in wide and "4h10m" in wide  # 251 min - 0.5 min run


def test_piped_output_is_plain_columns():
    out = statusout.text(snapshot(), True)
    _golden("status-piped.txt", out)
    assert not set(out) & set("─│┃━┏┓┗┛…")  # no box drawing, no ellipsis
    studies, trial_lines = out.split("\n\n")
    header, *rows = trial_lines.splitlines()
    assert header.split()[:6] == ["trial", "state", "attempt", "lr", "batch_size", "loss"]
    by_trial = {line.split()[0]: line.split() for line in rows}
    assert by_trial[trials()[0].trial][5] == "0.2313"
    assert sorted(by_trial) == sorted(t.trial for t in trials())  # awk '{print $1}' gives the names


def test_wide_adds_index_times_and_attempt_figures():
    out = statusout.text(snapshot(), True, wide=True)
    header = out.split("\n\n")[1].splitlines()[0].split()
    assert header[0] == "index" and {
        "job",
        "preemptions",
        "failed_attempts",
        "gpu_hours",
        "start",
        "finish",
        "exit_code",
    } <= set(header)
    assert "2025-05-01T07:49:00Z" in out  # the first trial's start, RFC 3339


def test_names_one_a_line():
    assert statusout.names(snapshot(), True) == "".join(f"{t.trial}\n" for t in trials())
    assert statusout.names(snapshot(), False) == f"{STUDY}\n"


def test_csv_parses_with_a_column_per_parameter_and_metric():
    rows = list(csv.DictReader(io.StringIO(statusout.csv(snapshot(), True))))
    assert [r["trial"] for r in rows] == [t.trial for t in trials()]
    first, failed = rows[0], rows[1]
    assert (first["lr"], first["batch_size"], first["loss"], first["accuracy"]) == ("0.1", "32", "0.23134", "0.912")
    assert float(first["duration_seconds"]) == 250.5 * 60 and first["start"] == "2025-05-01T07:49:00Z"
    assert (failed["exit_code"], failed["state"]) == ("3", "failed") and "max_failures" in failed["why"]
    _golden("status.csv", statusout.csv(snapshot(), True))
    studies = list(csv.DictReader(io.StringIO(statusout.csv(snapshot(), False))))
    assert studies[0]["failed"] == "1" and studies[0]["failed_attempts"] == "2" and studies[0]["waiting"] == "3"


def test_json_keys_are_snake_case_with_rfc3339_times_index_start_finish_duration():
    doc = statusout.document(snapshot(), True)
    json.dumps(doc)

    def keys(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                if key not in ("params", "result", "states"):
                    yield key
                    yield from keys(inner)
        elif isinstance(value, list):
            for inner in value:
                yield from keys(inner)

    assert all(k == k.lower() and "-" not in k for k in keys(doc)), sorted(set(keys(doc)))
    assert doc["taken_at"] == "2025-05-01T12:00:00Z"
    first = doc["trials"][0]
    assert (first["index"], first["start"], first["finish"], first["duration_seconds"]) == (
        0,
        "2025-05-01T07:49:00Z",
        "2025-05-01T11:59:30Z",
        250.5 * 60,
    )
    assert first["created"] == "2025-05-01T07:45:00Z"
    [study] = doc["studies"]
    assert (study["namespace"], study["failed_attempts"], study["states"]["failed"]) == ("ml-team", 2, 1)
    assert statusout.document(snapshot(), False).keys() == {"namespace", "taken_at", "studies"}


def test_json_text_is_the_document_with_one_trial_a_line():
    doc = statusout.document(snapshot(), True)
    text = statusout.json_text(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    assert [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith('    {"study"')] == doc["trials"]
    empty = {**doc, "trials": []}
    assert json.loads(statusout.json_text(empty)) == empty
    studies = statusout.document(snapshot(), False)
    assert statusout.json_text(studies) == json.dumps(studies, indent=2)


def test_wide_columns_have_distinct_names():
    for columns in (statusout.text(snapshot(), True, wide=True).split("\n\n"),):
        for part in columns:
            header = part.splitlines()[0].split()
            assert len(header) == len(set(header)), header


def test_a_trial_given_up_after_one_failure_says_once():
    from stratctl.backends.kubernetes.objects.state import TrialState
    from stratctl.run.recovery import Limits, TrialView, next_action

    view = TrialView(trial="t", attempt=0, state=TrialState.FAILED, failures=1)
    assert next_action(view, Limits(max_failures=0), False).reason == "failed once, more than retries.max_failures=0"


def test_words_and_durations():
    assert [plural(1, "trial"), plural(2, "trial"), plural(1, "study", "studies"), plural(0, "study", "studies")] == [
        "1 trial",
        "2 trials",
        "1 study",
        "0 studies",
    ]
    assert [duration(s) for s in (0, 45, 185, 840, 4 * 3600 + 11 * 60, 3600, 2 * 86400 + 3 * 3600)] == [
        "0s",
        "45s",
        "3m05s",
        "14m",
        "4h11m",
        "1h",
        "2d3h",
    ]


# ------------------------------------------------------------------ the study row and its trials


def test_a_finished_study_shows_its_outcome_not_a_decision():
    rows = [
        TrialRow(STUDY, f"t{i}", "succeeded" if i < 22 else "failed", 0, created=NOW - 900, finished=NOW - 60)
        for i in range(24)
    ]
    record = StudyRecord(study=STUDY, spec_hash="h", trials=24, target=8, reason="adaptive: multiplicative decrease")
    study = study_row(record, rows, NOW)
    assert study_note(study, NOW) == "finished: 22 succeeded, 2 failed in 14m"
    out = statusout.text(Snapshot("ns", NOW, [study], rows), False)
    assert "decrease" not in out and "finished: 22 succeeded, 2 failed in 14m" in out
    rows[0] = TrialRow(STUDY, "t0", "pruned", 0, created=NOW - 900, finished=NOW - 60)  # the pruner stopped one
    assert study_note(study_row(record, rows, NOW), NOW) == "finished: 21 succeeded, 2 failed, 1 pruned in 14m"
    assert out.splitlines()[1].split()[:5] == [STUDY, "24", "22", "2", "0"]  # trials, succeeded, failed, in flight
    assert out.splitlines()[1].split()[5] == "-"  # no target once finished


def test_in_flight_above_the_target_is_explained():
    study = StudyRow(STUDY, False, False, 10, {"running": 6, "waiting": 4}, 6, 4, "adaptive: decrease", 6, 0, 0, 0)
    assert "6 in flight above the target of 4" in study_note(study, NOW)


def test_the_study_row_is_counted_from_the_trials_read_not_from_an_older_summary(study_file):
    """The loop's summary said 8 waiting, nothing running; 3 trials run now: a study whose
    trials all fit in the table is counted from them, so its row and its rows agree."""
    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    from tests.unit.backends.kubernetes.test_summary import run_until

    run_until(submitter, cluster, clock, cycles=2)
    now = 5000.0 + clock()
    old = study_row(StudyRecord(study="loop", spec_hash="h", trials=10), [], now)  # all waiting
    cluster.record("loop")["data"].update(summary_data(old, at=now - 5))  # fresh enough to be used
    snap = collect(cluster, "stratctl-e2e", "loop", now=now, shown=50)
    [study] = snap.studies
    by_state = {}
    for t in snap.trials:
        by_state[t.state] = by_state.get(t.state, 0) + 1
    assert by_state and {k: v for k, v in study.states.items() if v and k != "waiting"} == by_state
    assert study.states["waiting"] == 10 - len(snap.trials)
    # with fewer rows shown than the study has, the summary (and its age) is what can be shown
    partial = collect(cluster, "stratctl-e2e", "loop", now=now, shown=1)
    assert partial.studies[0].states == old.states and partial.studies[0].as_of == now - 5


def test_sort_by_a_metric_no_trial_reports_is_a_usage_error_naming_those_that_exist():
    with pytest.raises(UsageError, match=r"no trial reports a metric 'los'; metrics reported: loss, accuracy"):
        sort_trials(trials(), "los")
    assert UsageError.exit_code == ExitCode.INVALID_INPUT == 2
    assert [t.index for t in sort_trials(trials(), "loss")][:2] == [0, 4]


# ------------------------------------------------------------------ the command


@pytest.fixture
def finished_study(study_file, monkeypatch):
    """A finished 10-trial study on the in-memory cluster, each trial reporting a loss."""
    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    assert submitter.run().succeeded == 10
    cluster.record("loop")["data"]["study.yaml"] = Path(study_file()).read_text()  # as `submit` keeps it
    for job in cluster.jobs():
        params = json.loads(job["metadata"]["annotations"]["stratctl.io/params"])
        pod = recorded.succeeded_pod(job, json.dumps({"loss": params["lr"] * params["layers"]}))
        cluster.create(pod)
    cluster.close = lambda: None
    monkeypatch.setattr("stratctl.backends.kubernetes.api.connect.one_shot", lambda *a, **k: cluster)
    return cluster


def run(*args):
    return CliRunner().invoke(app, ["status", *args])


def test_the_command_lists_studies_only_without_a_study(finished_study):
    out = run().output
    assert out.splitlines()[0].split()[:4] == ["study", "trials", "succeeded", "in_flight"]
    assert "loop" in out and "finished: 10 succeeded, 0 failed" in out
    assert "loop-" not in out  # no trial rows
    assert run("-o", "name").output == "loop\n"


def test_the_command_for_one_study_gives_names_csv_and_the_best(finished_study):
    names = run("loop", "-o", "name").output.split()
    assert len(names) == 10 and all(n.startswith("loop-") for n in names)
    rows = list(csv.DictReader(io.StringIO(run("loop", "-o", "csv").output)))
    assert list(rows[0])[4:7] == ["lr", "layers", "loss"] and len(rows) == 10  # the study file's order, like plan
    best = run("loop", "--best", "2", "--sort", "loss", "-o", "csv").output
    top = list(csv.DictReader(io.StringIO(best)))
    assert [float(r["loss"]) for r in top] == sorted(float(r["loss"]) for r in rows)[:2]
    assert run("loop", "--best", "2").exit_code == 2  # no objective: --sort says by what


def test_the_command_exits_2_for_an_unknown_sort_metric(finished_study):
    result = run("loop", "--sort", "accuracy")
    assert result.exit_code == 2
    assert "metrics reported: loss" in result.output


def test_an_empty_namespace_is_one_line(monkeypatch):
    cluster = FakeCluster("empty")
    cluster.close = lambda: None
    monkeypatch.setattr("stratctl.backends.kubernetes.api.connect.one_shot", lambda *a, **k: cluster)
    result = run()
    assert result.exit_code == 0
    assert result.output == "No studies found in namespace empty.\n"
    assert json.loads(run("-o", "json").output)["studies"] == []


def test_submit_ends_with_the_best_trial_and_its_parameters(finished_study, study_file, monkeypatch):
    from stratctl.run.progress import Progress

    monkeypatch.setattr(
        "stratctl.backends.launch.submit_study",
        lambda *a, **k: Progress(study="loop", total=10, succeeded=10, created=10),
    )
    result = CliRunner().invoke(app, ["submit", study_file()])
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    best = min((t for t in collect(finished_study, "stratctl-e2e", "loop").trials), key=lambda t: t.result["loss"])
    assert last == (
        f"best trial by loss (lowest): {best.trial} (lr={best.params['lr']}, "
        f"layers={best.params['layers']}): loss {best.result['loss']:.4g}"
    )


def test_best_n_by_a_metric_highest_first_and_the_default_ranking():
    from stratctl.run.ranking import default_ranking

    rows = trials()
    assert default_ranking(rows) == "loss"  # a loss: lowest first
    assert default_ranking([TrialRow("s", "t", "succeeded", 0, result={"accuracy": 0.9})]) == "-accuracy"
    assert default_ranking([TrialRow("s", "t", "succeeded", 0, result={"note": "x"})]) is None
    assert [t.index for t in sort_trials(rows, "-accuracy")[:2]] == [0, 4]


def test_a_label_selector_picks_studies_and_a_study_with_it_is_a_usage_error(finished_study):
    assert run("-l", "stratctl.io/critical=false", "-o", "name").output == "loop\n"
    chosen = run("-l", "stratctl.io/critical=true")
    assert chosen.exit_code == 0 and chosen.output == "No studies found in namespace stratctl-e2e.\n"
    assert run("loop", "-A").exit_code == 2 and run("loop", "-l", "a=b").exit_code == 2


def test_the_table_of_a_study_no_loop_follows_explains_its_first_trials_while_reading_the_rest(study_file):
    """Without a fresh summary every job is read; why the first trials wait is found at the
    same time from their own PodGroups, and the namespace's PodGroups are never listed."""
    from stratctl.backends.kubernetes.api.cluster import PODGROUP, VOLCANO_JOB
    from stratctl.backends.kubernetes.objects.state import podgroup_name
    from tests.unit.backends.kubernetes.test_summary import run_until
    from tests.unit.recorded import unschedulable_podgroup

    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    run_until(submitter, cluster, clock, cycles=2)
    jobs = sorted(cluster.list(VOLCANO_JOB)[0], key=lambda j: j["metadata"]["name"])
    assert len(jobs) >= 3
    for job in jobs:
        group = unschedulable_podgroup(job)
        group["metadata"]["name"] = podgroup_name(job)
        cluster.create(group)
    cluster.create(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "default"},
            "status": {"state": "Open"},
        }
    )
    cluster.record("loop")["data"].pop("summary", None)  # no loop follows it
    cluster.listed.clear()
    snap = collect(cluster, "stratctl-e2e", "loop", now=5000.0 + clock(), shown=4, reasons_for_all=False)
    shown, beyond = snap.trials[:4], snap.trials[4:]
    assert [t.state for t in shown].count("pending") >= 1 and [t.state for t in beyond].count("pending") >= 1
    assert all(t.pending.startswith("2/2 tasks in gang unschedulable") for t in shown if t.state == "pending")
    assert all(not t.pending for t in beyond)  # beyond the table: not looked up
    assert not [k for k, _ in cluster.listed if k == PODGROUP[1]]


def test_every_trial_is_read_from_the_shards_and_from_jobs_of_a_stratctl_without_them(study_file):
    from stratctl import labels
    from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
    from tests.unit.backends.kubernetes.test_summary import run_until

    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    run_until(submitter, cluster, clock, cycles=2)
    jobs = cluster.list(VOLCANO_JOB)[0]
    assert len({j["metadata"]["labels"][labels.SHARD] for j in jobs}) > 1
    old = jobs[0]["metadata"]["name"]
    del cluster.objects[(*VOLCANO_JOB, "stratctl-e2e", old)]["metadata"]["labels"][labels.SHARD]
    snap = collect(cluster, "stratctl-e2e", "loop", now=5000.0 + clock(), shown=None)
    assert sorted(t.job for t in snap.trials if t.job) == sorted(j["metadata"]["name"] for j in jobs)
