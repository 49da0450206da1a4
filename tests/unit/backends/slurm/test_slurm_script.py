"""An attempt's sbatch script: its #SBATCH options, and what it runs, run for real by
bash with a stand-in `srun` that records its arguments and environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from stratctl import rendezvous
from stratctl.backends.slurm.script import build, parse_comment
from stratctl.core.render import bundled_templates
from stratctl.core.space import expand
from tests.unit.rendering import Renderer
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
    assert options[:6] == [
        f"--job-name={first.job}",
        f"--comment={first.comment}",
        "--ntasks=2",
        "--time=90",
        # absolute: the study directory beside the study file, wherever sbatch runs
        f"--output={tmp_path.resolve()}/stratctl-out/sweep/{first.trial}/{first.job}-%j.log",
        "--requeue",
    ]
    assert set(options[6:]) == {
        "--partition=research",
        "--qos=low",
        "--gpus-per-task=1",
        "--cpus-per-task=2",
        "--mem-per-cpu=2048M",
        "--exclusive",
    }
    assert (first.tasks, first.gpus) == (2, 2)
    assert parse_comment(first.comment) == ("sweep", first.trial, 0, first.comment.rsplit("/", 1)[1])
    assert parse_comment("somebody else's job") is None and parse_comment("stratctl:a/b/x/h") is None


def test_a_later_attempt_is_another_job_of_the_same_trial(tmp_path):
    _, (zero, _) = scripts(tmp_path)
    _, (two, _) = scripts(tmp_path, attempt=2)
    assert two.trial == zero.trial and two.job != zero.job and two.attempt == 2
    assert parse_comment(two.comment)[1:3] == (zero.trial, 2)


# Stand-ins for Slurm's commands, run for real by the script: `scontrol` answers from
# FAKE_NODES ("name=addr ...", an empty addr: a node without NodeAddr; a node list with
# brackets stands for all of them); `srun` runs each component's command once per task as
# slurmstepd would, each task on its node of FAKE_PLACED (rank order), the step's layout in
# SLURM_STEP_* (or, for a heterogeneous job, FAKE_HET: each component's nodes, layout and
# placement), and prints its first component's options and each task's output; `python`
# (the trial's command) prints its arguments and environment.
SCONTROL = """
import os, sys
nodes = [n.split("=") for n in os.environ["FAKE_NODES"].split()]
if sys.argv[1:3] == ["show", "hostnames"]:
    print("\\n".join(name for name, _ in nodes) if "[" in sys.argv[3] else sys.argv[3].replace(",", "\\n"))
elif sys.argv[1:4] == ["-o", "show", "node"]:
    failing = os.environ.get("FAKE_UNANSWERED")  # a file counting the answers the controller still owes
    owed = int(open(failing).read()) if failing else 0
    if owed:
        open(failing, "w").write(str(owed - 1))
        sys.exit("slurm_load_partitions error: Socket timed out on send/recv operation")
    for name, addr in nodes:  # a word that a shell would glob, to be taken as it is
        print(f"NodeName={name} Arch=x86_64 " + (f"NodeAddr={addr} " if addr else "") + "Reason=* State=IDLE")
"""
SRUN = """
import json, os, subprocess, sys
parts = [[]]
for arg in sys.argv[1:]:
    parts.append([]) if arg == ":" else parts[-1].append(arg)
het = json.loads(os.environ.get("FAKE_HET") or "null")
if het:
    step = {}
    placed = [component[2] for component in het]
else:
    step = {"SLURM_STEP_NODELIST": os.environ["SLURM_JOB_NODELIST"],
            "SLURM_STEP_TASKS_PER_NODE": os.environ["FAKE_LAYOUT"]}
    placed = [os.environ["FAKE_PLACED"].split()]
assert len(parts) == len(placed), (parts, placed)
options, tasks = [], []
for part, nodes in zip(parts, placed):
    options.append(part[:next(i for i, a in enumerate(part) if not a.startswith("--"))])
    for node in nodes:
        env = {**os.environ, **step, "SLURM_PROCID": str(len(tasks)), "SLURMD_NODENAME": node}
        tasks.append(subprocess.run(part[len(options[-1]):], capture_output=True, text=True, env=env))
sys.stderr.write("".join(t.stderr for t in tasks))
print(json.dumps({"options": options[0], "components": len(parts),
                  "tasks": [json.loads(t.stdout or "null") for t in tasks]}))
sys.exit(max(t.returncode for t in tasks))
"""
PYTHON = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
"""
SLEEP = """
import sys
open("slept", "a").write(sys.argv[1] + "\\n")  # recorded, not slept
"""


def run_script(
    tmp_path,
    text,
    nodes="n1=10.0.0.1 n2=10.0.0.2",
    layout="2,1",
    placed="n1 n1 n2",
    job_id=12345,
    restarts=None,
    het=None,
    unanswered=0,
    extra=None,
):
    """Run an sbatch script with bash as Slurm would, with stand-ins for its commands: the
    step's tasks per node are `layout`, its tasks really run on the nodes `placed`; or, for
    a heterogeneous job, `het` gives each component's (nodes, tasks per node, placement)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, code in (("scontrol", SCONTROL), ("srun", SRUN), ("python", PYTHON), ("sleep", SLEEP)):
        (bin_dir / name).write_text(f"#!{sys.executable}" + code)  # not a shim that changes PATH (pyenv's)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "NodeAddr=evil").write_text("")  # what `Reason=*` would glob to, were it globbed
    script = tmp_path / "job.sh"
    script.write_text(text)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_NODES": nodes,
        "FAKE_LAYOUT": layout,
        "FAKE_PLACED": placed,
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_NTASKS": str(len(placed.split())),
        **({"SLURM_RESTART_COUNT": restarts} if restarts else {}),
        **(extra or {}),
    }
    if unanswered:
        (tmp_path / "unanswered").write_text(str(unanswered))
        env["FAKE_UNANSWERED"] = str(tmp_path / "unanswered")
    if het:  # what a heterogeneous job's batch step and tasks see (Slurm 22.05)
        env.update(
            {
                "FAKE_HET": json.dumps([[n, lay, where.split()] for n, lay, where in het]),
                "SLURM_HET_SIZE": str(len(het)),
                "SLURM_JOB_NODELIST": het[0][0],
                "SLURM_NTASKS": str(sum(len(where.split()) for _, _, where in het)),
            }
        )
        for c, (nodelist, tasks_per_node, _) in enumerate(het):
            env[f"SLURM_JOB_NODELIST_HET_GROUP_{c}"] = nodelist
            env[f"SLURM_TASKS_PER_NODE_HET_GROUP_{c}"] = tasks_per_node
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
    assert (out / "attempt-0.job").read_text() == f"12345 {restarts or 0}\n" and (
        out / "attempt-0.exit"
    ).read_text() == "0\n"
    assert not [line for line in hostile.text.splitlines() if line.startswith("#SBATCH") and "rm -rf" in line]


@pytest.mark.parametrize(
    "nodes, layout, placed, addrs, job_id",
    [
        ("n1=10.0.0.1 n2=10.0.0.2", "2,1", "n1 n1 n2", ["10.0.0.1", "10.0.0.1", "10.0.0.2"], 12345),
        ("n1=10.0.0.1 n2=10.0.0.2", "2(x2)", "n1 n1 n2 n2", ["10.0.0.1"] * 2 + ["10.0.0.2"] * 2, 40000),
        (
            "n1=10.0.0.1 n2=10.0.0.2 n3=10.0.0.3",
            "1(x2),2",
            "n1 n2 n3 n3",
            ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.3"],
            7,
        ),
        ("n1= n2=127.0.0.1", "1,1", "n1 n2", ["n1", "127.0.0.1"], 20001),  # a node without a NodeAddr: its name
        ("n1=127.0.0.1 n2=127.0.0.1", "1(x2)", "n1 n2", ["127.0.0.1", "127.0.0.1"], 39999),  # the testbed: one NodeAddr
    ],
)
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


@pytest.mark.parametrize(
    "unanswered, addrs",
    [
        (3, ["10.0.0.1", "10.0.0.1", "10.0.0.2"]),  # answers at the 4th try: waited for, 5 s between tries
        (99, ["n1", "n1", "n2"]),  # never within 2 minutes: said, and the node names stand in
    ],
)
def test_a_controller_that_does_not_answer_is_waited_for_before_the_tasks_start(tmp_path, unanswered, addrs):
    _, (first, _) = scripts(tmp_path)
    done = run_script(tmp_path, first.text, unanswered=unanswered)
    assert done.returncode == 0, done.stderr
    assert [t["env"]["STRATCTL_NODE_ADDRS"] for t in json.loads(done.stdout)["tasks"]] == [",".join(addrs)] * 3
    slept = (tmp_path / "slept").read_text().split()
    assert slept == ["5"] * min(unanswered, 23)
    assert ("did not answer for 2 minutes" in done.stderr) is (unanswered > 23)


def test_a_task_that_is_not_where_the_layout_says_gets_no_contract_and_the_attempt_fails(tmp_path):
    _, (first, _) = scripts(tmp_path)
    done = run_script(tmp_path, first.text, layout="2,1", placed="n1 n2 n1")  # cyclic, not block
    assert done.returncode == 1
    ran = [task is not None for task in json.loads(done.stdout)["tasks"]]
    assert ran == [True, False, False]  # the misplaced tasks did not run the command (srun ends the rest)
    assert (
        "stratctl: no rendezvous contract: task 1 of 3 (worker) runs on n2, but the tasks per node (2,1) over "
        "the nodes (n[1-3]) in block order put it on n1, 3 tasks in all (roles worker, first ranks 0)"
    ) in done.stderr
    assert (tmp_path / "stratctl-out" / "sweep" / first.trial / "attempt-0.exit").read_text() == "1\n"


def test_a_slurm_study_needs_no_image_but_a_command_for_each_task(tmp_path):
    no_command = STUDY.replace('  command: ["python", "train.py", "--lr={{ params.lr }}"]\n', '  args: ["--lr=1"]\n')
    assert any("study.yaml:9:" in p and "set trial.command" in p for p in problems(tmp_path, no_command))
    two = no_command.replace("tasks: [{name: worker, replicas: 2}]", 'tasks: [{name: a, command: ["a"]}, {name: b}]')
    found = problems(tmp_path, two)
    assert len(found) == 1 and "trial.tasks.1" in found[0] and "the command of task 'b'" in found[0], found
    assert [t.name for t in load(tmp_path, ROLES).trial.tasks] == ["ps", "worker"]  # several roles: a hetjob
    kube = STUDY.replace("backend: slurm\n", "")
    assert any("has no image" in p for p in problems(tmp_path, kube))  # Kubernetes still needs one


@pytest.mark.parametrize(
    "block, field, words",
    [
        ('{partition: "a\\nb"}', "slurm.partition", "one non-empty line"),
        ("{extra: [exclusive]}", "slurm.extra.0", "starting with '--'"),
        ("{time_limit: soon}", "slurm.time_limit", ""),
    ],
)
def test_a_bad_slurm_block_is_a_located_error(tmp_path, block, field, words):
    found = problems(
        tmp_path,
        STUDY.replace(
            'slurm: {partition: research, time_limit: 90m, qos: low, extra: ["--exclusive"]}', f"slurm: {block}"
        ),
    )
    assert found and all("study.yaml:3:" in p for p in found), found
    assert any(field in p and words in p for p in found), found


ROLES = """\
name: sweep
backend: slurm
slurm: {partition: research, time_limit: 90m}
space:
  lr: {type: choice, values: [0.1]}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--lr={{ params.lr }}"]
  env: {SHARED: "1"}
  tasks:
    - {name: ps, command: ["python", "ps.py"], env: {ROLE_ONLY: "x; $(id)"},
       resources: {requests: {cpu: 2, memory: 4Gi}}}
    - {name: worker, replicas: 2, resources: {limits: {nvidia.com/gpu: 1}}}
"""


def test_a_trial_of_several_roles_is_a_heterogeneous_job_one_component_a_role(tmp_path):
    _, (script,) = scripts(tmp_path, ROLES)
    options = [line.split(" ", 1)[1] for line in script.text.splitlines() if line.startswith("#SBATCH ")]
    out = f"{tmp_path.resolve()}/stratctl-out/sweep/{script.trial}"
    assert options == [
        f"--job-name={script.job}",
        f"--comment={script.comment}",
        "--ntasks=1",
        "--time=90",
        f"--output={out}/{script.job}-%j.log",
        "--requeue",
        "--partition=research",
        "--cpus-per-task=2",
        "--mem-per-cpu=2048M",
        "hetjob",
        "--ntasks=2",
        "--time=90",
        "--requeue",
        "--partition=research",
        "--gpus-per-task=1",
    ]
    assert (script.tasks, script.gpus) == (3, 2)


def test_each_role_runs_its_command_with_its_env_and_the_contract_across_components(tmp_path):
    """The ps component on n3, the workers on n1 and n2: ranks follow the task order (ps
    first), not the nodes' names, and each role's hosts are its own component's."""
    _, (script,) = scripts(tmp_path, ROLES)
    done = run_script(
        tmp_path,
        script.text,
        nodes="n1=10.0.0.1 n2=10.0.0.2 n3=10.0.0.3",
        job_id=31337,
        het=[("n3", "1", "n3"), ("n1,n2", "1(x2)", "n1 n2")],
    )
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["components"] == 2 and len(ran["tasks"]) == 3
    roles = [("ps", ["10.0.0.3"]), ("worker", ["10.0.0.1", "10.0.0.2"])]
    for rank, task in enumerate(ran["tasks"]):
        want = rendezvous.environment(roles, rank, rendezvous.derived_port(31337))
        assert {k: task["env"].get(k) for k in want} == want, rank
        assert task["env"]["SHARED"] == "1"
        assert task["env"].get("ROLE_ONLY") == ("x; $(id)" if rank == 0 else None)  # the ps task's own, literal
        assert task["argv"] == (["ps.py"] if rank == 0 else ["train.py", "--lr=0.1"])
    assert ran["tasks"][2]["env"]["STRATCTL_PS_HOSTS"] == "10.0.0.3"
    assert ran["tasks"][2]["env"]["STRATCTL_WORKER_HOSTS"] == "10.0.0.1,10.0.0.2"


def test_a_component_whose_layout_does_not_hold_fails_the_attempt(tmp_path):
    _, (script,) = scripts(tmp_path, ROLES)
    done = run_script(
        tmp_path,
        script.text,
        nodes="n1=10.0.0.1 n2=10.0.0.2 n3=10.0.0.3",
        het=[("n3", "1", "n3"), ("n1,n2", "2", "n1 n1")],
    )  # says 2 tasks on n1 and none on n2: holds
    assert done.returncode == 0, done.stderr
    done = run_script(
        tmp_path,
        script.text,
        nodes="n1=10.0.0.1 n2=10.0.0.2 n3=10.0.0.3",
        het=[("n3", "1", "n3"), ("n1,n2", "1(x2)", "n2 n1")],
    )
    assert done.returncode == 1
    assert (
        "task 1 of 3 (worker) runs on n2, but the tasks per node (1 1(x2)) over the nodes (n3 n1,n2) in block "
        "order put it on n1, 3 tasks in all (roles ps worker, first ranks 0 1)"
    ) in done.stderr


# -- a block's task (merged submissions): its trial read from the block's task file --------

MERGED = """\
name: sweep
backend: slurm
merge: auto
slurm: {partition: research, time_limit: 90m}
checkpoint: {location: "/ckpt/{{ study }}/{{ trial }}"}
space:
  lr: {type: choice, values: [0.1, "x; rm -rf / #\\n$(id)", "\\ttab\\\\n 'q' \\"dq\\" a=b é\\\\", ""]}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--lr={{ params.lr }}", "", "two  spaces"]
  env: {LR: "{{ params.lr }}", EMPTY: "", EQUALS: "a=b=c"}
  resources: {limits: {nvidia.com/gpu: 1}}
"""


def block_of(tmp_path, restarts=None):
    """A merged study's one block sent through its scheduler (the fake Slurm keeps what sbatch
    got); its trials, the sbatch script and the study directory."""
    from stratctl.backends.slurm.commands import Slurm
    from stratctl.backends.slurm.scheduler import SlurmScheduler
    from tests.unit.backends.fakes import FakeSlurm

    study = load(tmp_path, MERGED)
    fake = FakeSlurm()
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    trials = expand(study)
    scheduler.create(scheduler.prepare_block(trials, 2))
    return study, trials, fake.scripts[0], scheduler.output


def test_a_blocks_tasks_read_their_trials_from_one_file_the_sbatch_script_holds_no_trials_values(tmp_path):
    study, trials, text, output = block_of(tmp_path)
    files = sorted(p.relative_to(output).as_posix() for p in output.rglob("*"))
    assert files == [".blocks", ".blocks/block-1", ".blocks/block-1.tasks"]  # one file for every trial, no script
    lines = (output / ".blocks" / "block-1.tasks").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == [t.name for t in trials]  # line i: array task i
    assert "#SBATCH --array=0-3%2" in text and text.count("#SBATCH --job-name=") == 1
    for trial in trials:
        assert trial.name not in text and "rm -rf" not in text


@pytest.mark.parametrize("restarts", [None, "1"])
def test_a_blocks_task_runs_exactly_what_its_trial_ran_as_a_job_of_its_own(tmp_path, restarts):
    """Task i of the array, run by bash as Slurm runs it, against the script of the same
    trial's first attempt sent alone (what each task ran before, written beside its log):
    the same command line, word for word, the same environment, variable for variable,
    the same marks and the same log file, whatever the values hold (newlines, tabs,
    backslashes, quotes, `=`, empty words)."""
    (tmp_path / "block").mkdir()
    study, trials, text, output = block_of(tmp_path / "block")
    renderer = Renderer(study)
    for index, trial in enumerate(trials):
        alone = build(study, renderer.render(trial, attempt=0), [bundled_templates()], output)
        job_id = 500 + index
        common = {"SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_JOB_ID": "499"}
        shutil.rmtree(output / trial.name, ignore_errors=True)
        (output / trial.name).mkdir()  # sbatch opens the attempt's --output there
        before = run_script(
            tmp_path, alone.text, layout="1", placed="n1", job_id=job_id, restarts=restarts, extra=common
        )
        assert before.returncode == 0, before.stderr
        was = json.loads(before.stdout)
        marks = {p.name: p.read_text() for p in (output / trial.name).iterdir()}
        shutil.rmtree(output / trial.name)
        done = run_script(tmp_path, text, layout="1", placed="n1", job_id=job_id, restarts=restarts, extra=common)
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""  # the task's output goes to its trial's log, as before
        log = output / trial.name / f"{trial.name}-{job_id}.log"
        ran = json.loads(log.read_text())
        assert ran["options"] == was["options"] and len(ran["tasks"]) == 1
        (task,) = ran["tasks"]
        assert task["argv"] == was["tasks"][0]["argv"] == ["train.py", f"--lr={trial.params['lr']}", "", "two  spaces"]
        env = task["env"]
        assert env == was["tasks"][0]["env"], trial.params
        assert env["LR"] == str(trial.params["lr"]) and env["EMPTY"] == "" and env["EQUALS"] == "a=b=c"
        assert env["STRATCTL_OUTPUT_DIR"] == str(output / trial.name) and env["STRATCTL_RESUME"] == (
            "1" if restarts else "0"
        )
        assert not any(k.startswith("stratctl_") for k in env)  # the block script's own variables stay its own
        assert {p.name: p.read_text() for p in (output / trial.name).iterdir() if p.suffix != ".log"} == marks


def test_a_task_without_its_line_fails_saying_so_before_any_trial_runs(tmp_path):
    _, trials, text, output = block_of(tmp_path)
    done = run_script(tmp_path, text, layout="1", placed="n1", extra={"SLURM_ARRAY_TASK_ID": str(len(trials))})
    assert done.returncode == 1
    assert f"stratctl: task {len(trials)} has no trial in {output}/.blocks/block-1.tasks (line 5)" in done.stderr
    assert not (tmp_path / "slept").exists() and not [p for p in output.iterdir() if not p.name.startswith(".")]


def test_a_list_of_queues_is_one_multi_partition_submission_of_each_job(tmp_path):
    """Queue fallback on Slurm: `queue: [edge, research]` is `--partition=edge,research` on
    every job of the study: Slurm starts each in whichever listed partition can run it first."""
    text = STUDY.replace("slurm: {partition: research,", "queue: [edge, research]\nslurm: {")
    study, (first, _) = scripts(tmp_path, text)
    options = [line.split(" ", 1)[1] for line in first.text.splitlines() if line.startswith("#SBATCH ")]
    assert [o for o in options if o.startswith("--partition")] == ["--partition=edge,research"]
    assert "--qos=low" in options


def test_a_list_of_queues_reaches_every_component_of_a_heterogeneous_job(tmp_path):
    text = ROLES.replace("slurm: {partition: research,", "queue: [edge, research]\nslurm: {")
    _, (script,) = scripts(tmp_path, text)
    options = [line.split(" ", 1)[1] for line in script.text.splitlines() if line.startswith("#SBATCH ")]
    assert [o for o in options if o.startswith("--partition")] == ["--partition=edge,research"] * 2
