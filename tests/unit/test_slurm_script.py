"""An attempt's sbatch script: its #SBATCH options, and what it runs, run for real by
bash with a stand-in `srun` that records its arguments and environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stratctl import rendezvous
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


# Stand-ins for Slurm's commands, run for real by the script: `scontrol` answers from
# FAKE_NODES ("name=addr ...", an empty addr: a node without NodeAddr); `srun` runs its
# command once per task as slurmstepd would, the step's layout in SLURM_STEP_* and each task
# on its node of FAKE_PLACED (rank order), and prints its own options and each task's
# output; `python` (the trial's command) prints its arguments and environment.
SCONTROL = """
import os, sys
nodes = [n.split("=") for n in os.environ["FAKE_NODES"].split()]
if sys.argv[1:3] == ["show", "hostnames"]:
    print("\\n".join(name for name, _ in nodes))
elif sys.argv[1:4] == ["-o", "show", "node"]:
    for name, addr in nodes:  # a word that a shell would glob, to be taken as it is
        print(f"NodeName={name} Arch=x86_64 " + (f"NodeAddr={addr} " if addr else "") + "Reason=* State=IDLE")
"""
SRUN = """
import json, os, subprocess, sys
args = sys.argv[1:]
options = args[:next(i for i, a in enumerate(args) if not a.startswith("--"))]
step = {"SLURM_STEP_NODELIST": os.environ["SLURM_JOB_NODELIST"], "SLURM_STEP_TASKS_PER_NODE": os.environ["FAKE_LAYOUT"]}
tasks = [subprocess.run(args[len(options):], capture_output=True, text=True,
                        env={**os.environ, **step, "SLURM_PROCID": str(rank), "SLURMD_NODENAME": node})
         for rank, node in enumerate(os.environ["FAKE_PLACED"].split())]
sys.stderr.write("".join(t.stderr for t in tasks))
print(json.dumps({"options": options, "tasks": [json.loads(t.stdout or "null") for t in tasks]}))
sys.exit(max(t.returncode for t in tasks))
"""
PYTHON = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
"""


def run_script(tmp_path, text, nodes="n1=10.0.0.1 n2=10.0.0.2", layout="2,1", placed="n1 n1 n2", job_id=12345,
               restarts=None):
    """Run an sbatch script with bash as Slurm would, with stand-ins for its commands: the
    step's tasks per node are `layout`, its tasks really run on the nodes `placed`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, code in (("scontrol", SCONTROL), ("srun", SRUN), ("python", PYTHON)):
        (bin_dir / name).write_text(f"#!{sys.executable}" + code)  # not a shim that changes PATH (pyenv's)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "NodeAddr=evil").write_text("")  # what `Reason=*` would glob to, were it globbed
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_NODES": nodes, "FAKE_LAYOUT": layout,
           "FAKE_PLACED": placed, "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NODELIST": "n[1-3]",
           "SLURM_NTASKS": str(len(placed.split())), **({"SLURM_RESTART_COUNT": restarts} if restarts else {})}
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("restarts, resume", [(None, "0"), ("0", "0"), ("1", "1")])
def test_the_script_runs_the_command_with_hostile_values_as_plain_words(tmp_path, restarts, resume):
    _, (_, hostile) = scripts(tmp_path)
    done = run_script(tmp_path, hostile.text, restarts=restarts)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["options"] == ["--kill-on-bad-exit=1", "--distribution=block"]
    assert len(ran["tasks"]) == 3
    for task in ran["tasks"]:
        assert task["argv"] == ["train.py", "--lr=x; rm -rf / #\n$(id)"]
        env = task["env"]
        assert env["STRATCTL_RESUME"] == resume
        assert json.loads(env["STRATCTL_PARAMS"]) == {"lr": "x; rm -rf / #\n$(id)"}
        assert env["STRATCTL_CHECKPOINT_DIR"] == f"/ckpt/sweep/{hostile.trial}"
        assert env["STRATCTL_ATTEMPT"] == "0"
    out = tmp_path / "stratctl-out" / "sweep" / hostile.trial
    assert (out / "attempt-0.job").read_text() == "12345\n" and (out / "attempt-0.exit").read_text() == "0\n"
    assert not [line for line in hostile.text.splitlines() if line.startswith("#SBATCH") and "rm -rf" in line]


@pytest.mark.parametrize("nodes, layout, placed, addrs, job_id", [
    ("n1=10.0.0.1 n2=10.0.0.2", "2,1", "n1 n1 n2", ["10.0.0.1", "10.0.0.1", "10.0.0.2"], 12345),
    ("n1=10.0.0.1 n2=10.0.0.2", "2(x2)", "n1 n1 n2 n2", ["10.0.0.1"] * 2 + ["10.0.0.2"] * 2, 40000),
    ("n1=10.0.0.1 n2=10.0.0.2 n3=10.0.0.3", "1(x2),2", "n1 n2 n3 n3", ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.3"],
     7),
    ("n1= n2=127.0.0.1", "1,1", "n1 n2", ["n1", "127.0.0.1"], 20001),  # a node without a NodeAddr: its name
    ("n1=127.0.0.1 n2=127.0.0.1", "1(x2)", "n1 n2", ["127.0.0.1", "127.0.0.1"], 39999),  # the testbed: one NodeAddr
])
def test_every_task_gets_the_rendezvous_contract_of_its_rank(tmp_path, nodes, layout, placed, addrs, job_id):
    """Ranks in block order over the step's nodes, each its node's NodeAddr (several tasks
    on one node share it); MASTER_PORT from the job id, so two jobs on one node differ."""
    study = STUDY.replace("tasks: [{name: worker, replicas: 2}]", "tasks: [{name: param-server, replicas: 2}]")
    _, (first, _) = scripts(tmp_path, study)
    done = run_script(tmp_path, first.text, nodes, layout, placed, job_id)
    assert done.returncode == 0, done.stderr
    tasks = json.loads(done.stdout)["tasks"]
    port = rendezvous.derived_port(job_id)
    assert port == 20000 + job_id % 20000
    for rank, task in enumerate(tasks):
        want = rendezvous.environment([("param-server", addrs)], rank, port)
        assert {k: task["env"].get(k) for k in want} == want, rank
        assert want["STRATCTL_PARAM_SERVER_HOSTS"] == ",".join(addrs) and want["MASTER_ADDR"] == addrs[0]
    assert len(tasks) == len(addrs)


def test_a_task_that_is_not_where_the_layout_says_gets_no_contract_and_the_attempt_fails(tmp_path):
    _, (first, _) = scripts(tmp_path)
    done = run_script(tmp_path, first.text, layout="2,1", placed="n1 n2 n1")  # cyclic, not block
    assert done.returncode == 1
    ran = [task is not None for task in json.loads(done.stdout)["tasks"]]
    assert ran == [True, False, False]  # the misplaced tasks did not run the command (srun ends the rest)
    assert ("stratctl: no rendezvous contract: task 1 of 3 runs on n2, but SLURM_STEP_TASKS_PER_NODE=2,1 over n[1-3] "
            "in block order puts 3 tasks, this one on n1") in done.stderr
    assert (tmp_path / "stratctl-out" / "sweep" / first.trial / "attempt-0.exit").read_text() == "1\n"


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
