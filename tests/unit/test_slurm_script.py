"""An attempt's sbatch script: its #SBATCH options, and what it runs, run for real by
bash with a stand-in `srun` that records its arguments and environment."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from stratctl.slurm.script import build, parse_comment
from stratctl.study.render import Renderer, bundled_templates
from stratctl.study.space import expand
from tests.unit.studies import load, problems

STUDY = """\
name: sweep
backend: slurm
slurm: {partition: research, time_limit: 90m, qos: low, extra: ["--exclusive"]}
checkpoint: {location: "/ckpt/{{ study }}/{{ trial }}"}
space:
  lr: {type: choice, values: [0.1, "x; rm -rf / #\\n$(id)"]}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--lr={{ params.lr }}"]
  resources: {requests: {cpu: 2, memory: 4Gi}, limits: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 2}]
"""


def scripts(tmp_path, text=STUDY, attempt=0):
    study = load(tmp_path, text)
    renderer = Renderer(study)
    return study, [build(study, renderer.render(t, attempt=attempt), [bundled_templates()]) for t in expand(study)]


def test_the_options_name_the_attempt_and_ask_for_the_gang(tmp_path):
    study, (first, _) = scripts(tmp_path)
    options = [line.split(" ", 1)[1] for line in first.text.splitlines() if line.startswith("#SBATCH ")]
    assert options[:6] == [f"--job-name={first.job}", f"--comment={first.comment}", "--ntasks=2", "--time=90",
                           f"--output=stratctl-out/sweep/{first.trial}/{first.job}-%j.log", "--requeue"]
    assert set(options[6:]) == {"--partition=research", "--qos=low", "--gpus-per-task=1", "--cpus-per-task=2",
                                "--mem-per-cpu=2048M", "--exclusive"}
    assert (first.tasks, first.gpus) == (2, 2)
    assert parse_comment(first.comment) == ("sweep", first.trial, 0, first.comment.rsplit("/", 1)[1])
    assert parse_comment("somebody else's job") is None and parse_comment("stratctl:a/b/x/h") is None


def test_a_later_attempt_is_another_job_of_the_same_trial(tmp_path):
    _, (zero, _) = scripts(tmp_path)
    _, (two, _) = scripts(tmp_path, attempt=2)
    assert two.trial == zero.trial and two.job != zero.job and two.attempt == 2
    assert parse_comment(two.comment)[1:3] == (zero.trial, 2)


@pytest.mark.parametrize("restarts, resume", [(None, "0"), ("0", "0"), ("1", "1")])
def test_the_script_runs_the_command_with_hostile_values_as_plain_words(tmp_path, restarts, resume):
    _, (_, hostile) = scripts(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items() "
                    "if k.startswith('STRATCTL_')}}))\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "job.sh"
    script.write_text(hostile.text)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **({"SLURM_RESTART_COUNT": restarts} if restarts else {})}
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["argv"] == ["--kill-on-bad-exit=1", "python", "train.py", "--lr=x; rm -rf / #\n$(id)"]
    assert ran["env"]["STRATCTL_RESUME"] == resume
    assert json.loads(ran["env"]["STRATCTL_PARAMS"]) == {"lr": "x; rm -rf / #\n$(id)"}
    assert ran["env"]["STRATCTL_CHECKPOINT_DIR"] == f"/ckpt/sweep/{hostile.trial}"
    assert ran["env"]["STRATCTL_ATTEMPT"] == "0"
    out = tmp_path / "stratctl-out" / "sweep" / hostile.trial
    assert (out / "attempt-0.job").read_text() == "0\n" and (out / "attempt-0.exit").read_text() == "0\n"
    assert not [line for line in hostile.text.splitlines() if line.startswith("#SBATCH") and "rm -rf" in line]


def test_a_slurm_study_needs_no_image_but_a_command_and_one_kind_of_task(tmp_path):
    no_command = STUDY.replace('  command: ["python", "train.py", "--lr={{ params.lr }}"]\n', '  args: ["--lr=1"]\n')
    assert any("study.yaml:9:" in p and "set trial.command" in p for p in problems(tmp_path, no_command))
    two = STUDY.replace("tasks: [{name: worker, replicas: 2}]", "tasks: [{name: a}, {name: b}]")
    assert any("trial.tasks" in p and "one kind of task" in p for p in problems(tmp_path, two))
    kube = STUDY.replace("backend: slurm\n", "")
    assert any("has no image" in p for p in problems(tmp_path, kube))  # Kubernetes still needs one


@pytest.mark.parametrize("block, field, words", [
    ('{partition: "a\\nb"}', "slurm.partition", "one non-empty line"),
    ("{extra: [exclusive]}", "slurm.extra.0", "starting with '--'"),
    ("{time_limit: soon}", "slurm.time_limit", ""),
])
def test_a_bad_slurm_block_is_a_located_error(tmp_path, block, field, words):
    found = problems(tmp_path, STUDY.replace("slurm: {partition: research, time_limit: 90m, qos: low, "
                                             'extra: ["--exclusive"]}', f"slurm: {block}"))
    assert found and all("study.yaml:3:" in p for p in found), found
    assert any(field in p and words in p for p in found), found
