"""Slurm's commands as the backend runs them: the argv sent, and each failure sorted into
back off (Unavailable), slow down (Throttled) or this job's verdict (Invalid)."""

from __future__ import annotations

import json
import subprocess

import pytest

from stratctl.backends.slurm.commands import Slurm, error_of
from stratctl.errors import Invalid, Throttled, Unavailable, Unreachable


class Script:
    """Answers each command from a list of (returncode, stdout, stderr), recording argv and stdin."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[list[str], str | None, dict]] = []

    def __call__(self, argv, input=None, capture_output=True, text=True, timeout=None, env=None):
        self.calls.append((argv, input, env))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        code, out, err = answer
        return subprocess.CompletedProcess(argv, code, out, err)


@pytest.mark.parametrize(
    "stderr, kind",
    [
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", Unavailable),
        ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", Unavailable),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            Unavailable,
        ),
        ("sbatch: error: QOSMaxSubmitJobPerUserLimit", Throttled),
        (
            "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
            "(job submit limit, user's size and/or time limits) AssocMaxSubmitJobLimit",
            Throttled,
        ),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", Invalid),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available", Invalid),
    ],
)
def test_a_failure_is_sorted_by_what_it_says(stderr, kind):
    error = error_of("sbatch", 1, stderr)
    assert type(error) is kind
    assert str(error).startswith("sbatch: ") and "error" in str(error)


def test_submit_sends_the_script_on_stdin_and_reads_the_job_id():
    run = Script((0, "4242;cluster\n", ""))
    slurm = Slurm(env={"SLURM_CONF": "/etc/x.conf"}, run=run)
    assert slurm.submit("#!/bin/bash\ntrue\n", workdir="/data") == 4242
    argv, stdin, env = run.calls[0]
    assert argv == ["sbatch", "--parsable", "--chdir=/data"] and stdin == "#!/bin/bash\ntrue\n"
    assert env["SLURM_CONF"] == "/etc/x.conf" and slurm.calls == 1


def test_a_refused_submit_raises_what_it_stands_for():
    slurm = Slurm(
        run=Script(
            (1, "", "sbatch: error: Socket timed out on send/recv operation"),
            (1, "", "sbatch: error: Invalid account or account/partition combination specified"),
        )
    )
    with pytest.raises(Unavailable, match="Socket timed out"):
        slurm.submit("x")
    with pytest.raises(Invalid, match="Invalid account"):
        slurm.submit("x")


def test_a_command_that_hangs_or_is_missing():
    slurm = Slurm(run=Script(subprocess.TimeoutExpired(["squeue"], 60), FileNotFoundError("squeue")))
    with pytest.raises(Unavailable, match="no answer"):
        slurm.jobs()
    with pytest.raises(Invalid, match="slurm-client"):
        slurm.jobs()


def test_jobs_and_nodes_read_the_json_and_find_looks_a_name_up():
    jobs = {"jobs": [{"job_id": 7, "name": "a", "job_state": "PENDING"}]}
    nodes = {"nodes": [{"name": "sn1", "gres": "gpu:4", "gres_used": "gpu:1"}]}
    run = Script(
        (0, json.dumps(jobs), ""), (0, json.dumps(nodes), ""), (0, "12\n9\n", ""), (0, "", ""), (0, "not json", "")
    )
    slurm = Slurm(run=run)
    assert slurm.jobs() == jobs["jobs"] and slurm.nodes() == nodes["nodes"]
    assert slurm.find("trial-a1") == 9 and slurm.find("nothing") is None
    assert run.calls[2][0] == ["squeue", "--all", "--noheader", "--format=%F", "--name=trial-a1"]
    with pytest.raises(Unavailable, match="not JSON"):
        slurm.jobs()


def test_no_cluster_configured_fails_at_once_with_what_to_set(monkeypatch):
    """A first setup mistake (no SLURM_CONF, no slurm.conf) is not a controller to wait for."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    stderr = (
        "squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "squeue: error: fetch_config: DNS SRV lookup failed\n"
        "squeue: error: _establish_config_source: failed to fetch config\n"
        "squeue: fatal: Could not establish a configuration source\n"
    )
    slurm = Slurm(run=Script((1, "", stderr)))
    with pytest.raises(Unreachable) as caught:
        slurm.jobs()
    assert not isinstance(caught.value, Unavailable)  # nothing retries it
    assert "SLURM_CONF is not set" in str(caught.value) and "set SLURM_CONF" in str(caught.value)


def test_a_command_name_is_said_once():
    error = error_of("sbatch", 1, "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert str(error) == "sbatch: error: Batch job submission failed: Invalid partition name specified"


SILENT_CONTROLLER = {  # what squeue --json prints, exit status 0, when slurmctld does not answer (22.05)
    "meta": {"Slurm": {"release": "22.05.8"}},
    "errors": [
        {
            "description": "Failed while looking for jobs",
            "error_number": -1,
            "error": "Unspecified error",
            "source": "slurm_load_jobs",
        }
    ],
    "jobs": [],
}


def test_a_listing_that_says_errors_is_no_listing():
    """An empty list with errors would make every job of the study look gone (and be sent again)."""
    slurm = Slurm(
        run=Script(
            (0, json.dumps(SILENT_CONTROLLER), ""),
            (0, json.dumps({**SILENT_CONTROLLER, "jobs": None, "nodes": []}), ""),
            (0, json.dumps({"jobs": []}), ""),
        )
    )
    with pytest.raises(Unavailable, match="Failed while looking for jobs"):
        slurm.jobs()
    with pytest.raises(Unavailable, match="not a whole listing"):
        slurm.nodes()
    assert slurm.jobs() == []  # an empty queue, said without errors, is empty


def test_whether_the_controller_knows_a_studys_jobs_is_read_from_their_comments_alone():
    listing = "COMMENT\n(null)\nstratctl:other/t1/0/h\nstratctl:sweep2/t1/0/h\nstratctl:sweep/@block-1/0/h\n"
    script = Script((0, listing, ""), (0, listing, ""))
    slurm = Slurm(run=script)
    assert slurm.knows("stratctl:sweep/") and not slurm.knows("stratctl:sweep3/")
    assert script.calls[0][0] == ["squeue", "--all", "--states=all", "--format=%k"]  # every state: ended ones too


@pytest.mark.parametrize("out", ["", "stratctl:sweep/t1/0/h\n"])
def test_a_comment_listing_without_squeues_header_is_no_listing(out):
    # squeue prints its header once it has read the job table: without it, nothing says the study has no job
    with pytest.raises(Unavailable, match="no listing"):
        Slurm(run=Script((0, out, ""))).knows("stratctl:sweep/")


def test_a_study_the_controller_knows_no_job_of_is_not_listed_whole_until_it_does(tmp_path):
    from stratctl.backends.slurm.scheduler import SlurmScheduler
    from stratctl.core.space import expand
    from tests.unit.backends.fakes import FakeSlurm
    from tests.unit.rendering import Renderer
    from tests.unit.studies import load

    study = load(
        tmp_path,
        """\
        name: sweep
        backend: slurm
        space: {seed: {type: int, low: 0, high: 1, grid: true}}
        strategy: {kind: grid}
        trial: {command: ["train"]}
        """,
    )
    fake = FakeSlurm()
    fake.jobs.append({"job_id": 7, "name": "x", "comment": "stratctl:other/t/0/h", "job_state": "RUNNING"})
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    assert scheduler.attempts() == {}
    assert not [argv for argv in fake.commands if "--json" in argv]  # another study's jobs: not read whole
    trial = expand(study)[0]
    scheduler.create(scheduler.prepare(trial, 0))
    assert set(scheduler.attempts()) == {trial.name}
    assert [argv for argv in fake.commands if "--json" in argv] == [["squeue", "--json", "--all"]]
