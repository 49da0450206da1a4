"""Trials whose tasks are one distributed program, on real Slurm daemons: every task of a
trial of 2 and of 3 tasks does a real TCP rendezvous through the contract
(examples/rendezvous/rendezvous_check.py: rank 0 listens on MASTER_ADDR:MASTER_PORT and
must hear every other rank exactly once, or the trial fails); two trials on one node at
the same time do not collide; a preempted trial, requeued, rendezvouses again."""

from __future__ import annotations

import json
import time
from pathlib import Path

from stratctl import rendezvous

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rendezvous"
PROGRAM = EXAMPLE / "rendezvous_check.py"

STUDY = """\
name: {name}
backend: slurm
slurm: {{partition: research, time_limit: 5m, extra: {extra}}}
space:
  tasks: {{type: choice, values: {sizes}}}
  seed: {{type: int, low: 0, high: {last_copy}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["python3", "{program}", "--timeout", "60", "--hold", "{hold}",
            "--history", "stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"]
  resources: {{requests: {{cpu: {cpus}}}, limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: "{{{{ params.tasks }}}}"}}]
throttle: {{parallelism: {{min: 1, initial: 4, max: 4}}}}
"""


def study(tmp_path, name, sizes=(2, 3), copies=1, hold=0, cpus=1, gpus=0, extra=()):
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            name=name,
            sizes=list(sizes),
            last_copy=copies - 1,
            program=PROGRAM,
            hold=hold,
            cpus=cpus,
            gpus=gpus,
            extra=json.dumps(list(extra)),
        )
    )
    return path


def outcome(tmp_path, name):
    """trial -> (its result.json, the rendezvous records its rank 0 appended, oldest first)."""
    out = {}
    for trial in (tmp_path / "stratctl-out" / name).iterdir():
        history = trial / "rendezvous.jsonl"
        records = [json.loads(line) for line in history.read_text().splitlines()] if history.exists() else []
        result = trial / "result.json"
        out[trial.name] = (json.loads(result.read_text()) if result.exists() else None, records)
    return out


def node_addrs(slurm) -> dict[str, str]:
    """Each node's NodeAddr, as Slurm knows it."""
    nodes = json.loads(slurm.run("sinfo", "--json").stdout)["nodes"]
    return {n["name"]: n["address"] for n in nodes}


def job_ids(slurm, name) -> dict[str, int]:
    return {j["comment"].split("/")[1]: j["job_id"] for j in slurm.jobs(name)}


def test_every_task_of_trials_of_2_and_3_tasks_meets_through_the_contract(slurm, tmp_path):
    """The example study as shipped (3 CPUs a task: the 3-task trial spans two nodes, two
    of its tasks on one), its program run from this checkout."""
    name = f"rdv-{int(time.time()) % 100000}"
    text = (EXAMPLE / "slurm.yaml").read_text().replace("name: rendezvous", f"name: {name}")
    text = text.replace(
        '"examples/rendezvous/rendezvous_check.py"',
        f'"{PROGRAM}", "--history", "stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"',
    )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["succeeded"] == 2 and json.loads(done.stdout)["failed"] == 0
    ids, addr_of = job_ids(slurm, name), node_addrs(slurm)
    sizes = set()
    for trial, (result, [record]) in outcome(tmp_path, name).items():
        n = record["world_size"]
        sizes.add(n)
        port = rendezvous.derived_port(ids[trial])  # 20000 + the job id % 20000
        assert result == {
            "rendezvous": "ok",
            "world_size": n,
            "peers_heard": n - 1,
            "master": f"{addr_of[record['nodes'][0]]}:{port}",
            "resumed": False,
        }, result
        assert record["heard"] == list(range(1, n))  # every other rank, once
        # each rank's address is the NodeAddr of the node Slurm ran it on, in rank order
        assert record["addrs"] == [addr_of[node] for node in record["nodes"]], record
        assert record["roles"] == {"worker": n}
        if n == 3:  # two tasks a node: ranks 0 and 1 on one node, rank 2 on another
            assert record["nodes"][0] == record["nodes"][1] != record["nodes"][2], record
    assert sizes == {2, 3}
    shown = json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)
    assert sorted(r["result"]["world_size"] for r in shown["trials"]) == [2, 3]


def test_two_trials_on_one_node_at_the_same_time_do_not_collide(slurm, tmp_path):
    """Both held on sn4, both listening at once, each on its own job's port."""
    name = f"rdv-node-{int(time.time()) % 100000}"
    path = study(tmp_path, name, sizes=(2,), copies=2, hold=6, extra=["--nodelist=sn4"])
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["succeeded"] == 2
    ids = job_ids(slurm, name)
    records = {trial: records for trial, (_, records) in outcome(tmp_path, name).items()}
    assert len(records) == 2 and all(len(r) == 1 for r in records.values()), records
    (a, [ra]), (b, [rb]) = records.items()
    assert ra["nodes"] == rb["nodes"] == ["sn4", "sn4"]
    assert ra["master"] != rb["master"], (ra, rb)
    assert {ra["master"], rb["master"]} == {f"127.0.0.1:{rendezvous.derived_port(ids[t])}" for t in (a, b)}
    # each rank 0 listened from its first time to `hold` seconds after it met its peers: both at once
    (a0, a1), (b0, b1) = ra["listening"], rb["listening"]
    assert max(a0, b0) < min(a1, b1) + 6, (ra["listening"], rb["listening"])


def met_then_preempted(slurm, tmp_path, name) -> tuple[str, str]:
    """Once the study's one trial has met, preempt it: a prod job asking for all 4 GPUs of a
    node its job holds (aimed at it, so other work on the shared testbed does not take the
    preemption). (the trial, the prod job's id)"""

    def met():
        seen = outcome(tmp_path, name) if (tmp_path / "stratctl-out" / name).is_dir() else {}
        return next((trial for trial, (_, records) in seen.items() if records), None)

    trial = slurm.wait("the trial's tasks met", met, timeout=120)
    gpus = [j for j in slurm.jobs(name) if "gpu" in str(j.get("tres_per_task")) and j["job_state"] == "RUNNING"]
    node = slurm.run("scontrol", "show", "hostnames", gpus[0]["nodes"]).stdout.split()[0]
    prod = slurm.run(
        "sbatch",
        "--parsable",
        "-p",
        "prod",
        "--gres=gpu:4",
        f"--nodelist={node}",
        "--job-name=prod-urgent",
        "--output=/dev/null",
        "--wrap",
        "sleep 2",
    ).stdout.strip()
    return trial, prod


def test_a_preempted_trial_rendezvouses_again_when_slurm_requeues_it(slurm, tmp_path):
    """A trial of 2 tasks x 4 GPUs meets; a prod job preempts it; Slurm requeues it and its
    next run meets again, resuming, on the same port."""
    name = f"rdv-preempt-{int(time.time()) % 100000}"
    path = study(tmp_path, name, sizes=(2,), hold=20, gpus=4)
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    trial, prod = met_then_preempted(slurm, tmp_path, name)
    slurm.wait("the trial requeued", lambda: [j for j in slurm.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 1 and json.loads(out)["failed"] == 0
    result, records = outcome(tmp_path, name)[trial]
    assert [r["resumed"] for r in records] == [False, True], records  # met before, and again after the requeue
    assert all(r["rendezvous"] == "ok" and r["heard"] == [1] for r in records)
    assert records[0]["master"] == records[1]["master"]  # the same job: the same port, bound again
    assert result["resumed"] is True
    assert f"trial {trial}: preempted, requeued by Slurm" in err
    assert prod.isdigit()


ROLES = """\
name: {name}
backend: slurm
slurm: {{partition: research, time_limit: 5m}}
space:
  seed: {{type: int, low: 0, high: 0, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["python3", "{program}", "--timeout", "60", "--hold", "20",
            "--history", "stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"]
  tasks:
    - {{name: ps, resources: {{requests: {{cpu: 1}}}}}}
    - {{name: worker, replicas: 2, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}
"""


def test_a_trial_of_two_roles_is_one_heterogeneous_job_whose_every_task_meets_even_after_preemption(slurm, tmp_path):
    """A trial of a CPU-only `ps` and two 4-GPU workers is a heterogeneous job of two
    components; every task meets rank 0 (the ps) through the contract, each role's hosts
    its own component's; a prod job preempts it, Slurm requeues the whole job, and its
    tasks meet again."""
    name = f"rdv-roles-{int(time.time()) % 100000}"
    path = tmp_path / "study.yaml"
    path.write_text(ROLES.format(name=name, program=PROGRAM))
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    trial, prod = met_then_preempted(slurm, tmp_path, name)
    jobs = slurm.jobs(name)
    assert sorted(j["het_job_offset"] for j in jobs) == [0, 1], jobs  # one job of two components
    slurm.wait("the trial requeued", lambda: [j for j in slurm.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 1 and json.loads(out)["failed"] == 0
    addr_of = node_addrs(slurm)
    result, records = outcome(tmp_path, name)[trial]
    assert [r["resumed"] for r in records] == [False, True], records
    for record in records:
        assert record["rendezvous"] == "ok" and record["heard"] == [1, 2]
        assert record["roles"] == {"ps": 1, "worker": 2}  # STRATCTL_PS_*, STRATCTL_WORKER_* agreed by all
        assert record["addrs"] == [addr_of[node] for node in record["nodes"]], record
        assert record["nodes"][1] != record["nodes"][2]  # 4 GPUs a worker: one a node
    assert result["resumed"] is True
    assert f"trial {trial}: preempted, requeued by Slurm" in err
    assert len(slurm.jobs(name)) == 2 and prod.isdigit()  # the same job, requeued: nothing resubmitted
