"""Trials whose tasks are one distributed program, on each batch backend's real testbed:
every task of a trial of 2 and of 3 tasks does a real TCP rendezvous through the contract
(examples/rendezvous/rendezvous_check.py: rank 0 listens on MASTER_ADDR:MASTER_PORT and
must hear every other rank exactly once, or the trial fails); trials on one node at the
same time do not collide, each on its own attempt's port; a preempted trial meets again
(Slurm: the same job requeued, the same port; YARN: its next attempt, a new application
and port). Slurm's heterogeneous job of two roles is tested here too; YARN's two roles are
the example study's own."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.backends.backends import Slurm, tag

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rendezvous"
PROGRAM = EXAMPLE / "rendezvous_check.py"

STUDY = """\
name: {name}
{header}space:
  tasks: {{type: choice, values: {sizes}}}
  seed: {{type: int, low: 0, high: {last_copy}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["python3", "{program}", "--timeout", "60", "--hold", "{hold}", "--history", "{history}"]
  resources: {{{requests}limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: "{{{{ params.tasks }}}}"}}]
throttle: {{parallelism: {{min: 1, initial: 4, max: 4}}}}
"""


def history(tmp_path: Path, name: str) -> str:
    """Where rank 0 appends each rendezvous it completed: the trial's output directory,
    absolute (a YARN container starts in its NodeManager's work directory)."""
    return f"{tmp_path}/stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"


def study(backend, tmp_path, name, sizes=(2, 3), copies=1, hold=0, gpus=0, extra=""):
    path = tmp_path / "study.yaml"
    requests = "requests: {cpu: 1}, " if backend.name == "slurm" else backend.requests
    path.write_text(
        STUDY.format(
            name=name,
            header=backend.header(extra=extra),
            requests=requests,
            sizes=list(sizes),
            last_copy=copies - 1,
            program=PROGRAM,
            hold=hold,
            history=history(tmp_path, name),
            gpus=gpus,
        )
    )
    return path


def outcome(tmp_path, name):
    """trial -> (its result.json, the rendezvous records its rank 0 appended, oldest first)."""
    out = {}
    for trial in (tmp_path / "stratctl-out" / name).glob("[!.]*"):  # the trials' directories, not the study's own
        log = trial / "rendezvous.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        result = trial / "result.json"
        out[trial.name] = (json.loads(result.read_text()) if result.exists() else None, records)
    return out


def used(app: dict) -> tuple[int, int, int]:
    """Memory (MB), vcores and GPUs a YARN application holds (its AM's container included)."""
    gpus = sum(
        i["value"]
        for p in app["resourceInfo"]["resourceUsagesByPartition"]
        for i in p["used"]["resourceInformations"]["resourceInformation"]
        if i["name"] == "yarn.io/gpu"
    )
    return app["allocatedMB"], app["allocatedVCores"], gpus


def example(backend, tmp_path, name) -> Path:
    """The example study as shipped, its program run from this checkout, its history kept.
    Slurm's: 3 CPUs a task (the 3-task trial spans two nodes, two of its tasks on one).
    YARN's: a 256 MB CPU-only ps, 512 MB 2-vcore 1-GPU workers (a trial of 2 containers, one of 3)."""
    if backend.name == "slurm":
        text = (EXAMPLE / "slurm.yaml").read_text().replace("name: rendezvous", f"name: {name}")
        text = text.replace(
            '"examples/rendezvous/rendezvous_check.py"',
            f'"{PROGRAM}", "--history", "stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"',
        )
    else:
        text = (EXAMPLE / "yarn.yaml").read_text().replace("name: rendezvous-yarn", f"name: {name}")
        text = text.replace("http://127.0.0.1:28088", backend.bed.rm)
        text = text.replace(
            '"$STRATCTL_OUTPUT_DIR/../../../examples/rendezvous/rendezvous_check.py"',
            f'{PROGRAM} --hold 4 --history "$STRATCTL_OUTPUT_DIR/rendezvous.jsonl"',
        )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_every_task_of_the_example_trials_of_2_and_3_meets_through_the_contract(backend, tmp_path):
    bed = backend.bed
    name = f"rdv-{int(time.time()) % 100000}"
    path = example(backend, tmp_path, name)
    loop = bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    held: dict[str, tuple[int, int, int]] = {}
    if backend.name == "yarn":

        def both_seen_running():  # while rank 0 holds: what each whole gang holds
            for app in bed.apps(name):
                if app["state"] == "RUNNING" and app["progress"] >= 50 and app["runningContainers"] >= 3:
                    held.setdefault(tag(app, "trial"), used(app))
            return len(held) == 2

        bed.wait("both gangs running", both_seen_running, timeout=120)
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 2 and json.loads(out)["failed"] == 0
    records = {trial: attempts[-1] for trial, attempts in backend.records(name).items()}
    addr_of = backend.addresses()
    sizes = {}
    for trial, (result, [record]) in outcome(tmp_path, name).items():
        n = record["world_size"]
        sizes[n] = trial
        # rank 0's address, as the scheduler knows its node, and the attempt's own port
        assert result == {
            "rendezvous": "ok",
            "world_size": n,
            "peers_heard": n - 1,
            "master": f"{addr_of[record['nodes'][0]]}:{backend.port(records[trial])}",
            "resumed": False,
        }, result
        assert record["heard"] == list(range(1, n))  # every other rank, once
        # each rank's address is the one of the node the scheduler ran it on, in rank order
        assert record["addrs"] == [addr_of[node] for node in record["nodes"]], record
        if backend.name == "slurm":
            assert record["roles"] == {"worker": n}
            if n == 3:  # two tasks a node: ranks 0 and 1 on one node, rank 2 on another
                assert record["nodes"][0] == record["nodes"][1] != record["nodes"][2], record
        else:
            assert record["roles"] == {"ps": 1, "worker": n - 1}  # the ps first: rank 0
            assert record["nodes"] == record["addrs"], record  # the NodeManagers' hosts
    assert sorted(sizes) == [2, 3]
    if backend.name == "yarn":  # each role's containers of its own size:
        # the AM (256 MB, 1 vcore) + the ps (256 MB, 1 vcore) + each worker (512 MB, 2 vcores, 1 GPU)
        assert held[sizes[2]] == (256 + 256 + 512, 1 + 1 + 2, 1), held
        assert held[sizes[3]] == (256 + 256 + 2 * 512, 1 + 1 + 2 * 2, 2), held
    shown = json.loads(bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)
    assert sorted(r["result"]["world_size"] for r in shown["trials"]) == [2, 3]


# trials on one node: Slurm's two of 2 tasks held on sn4; YARN's four of 2 and 3 containers
# (its testbed's NodeManagers share one host)
ONE_NODE = {"slurm": ((2,), 2, ", extra: [--nodelist=sn4]"), "yarn": ((2, 3), 2, "")}


def masters_of(records):
    return [r[0]["master"] for r in records.values()]


def test_trials_on_one_node_at_the_same_time_do_not_collide(backend, tmp_path):
    """Each rank 0 listens on its own attempt's port, all at once."""
    bed = backend.bed
    sizes, copies, extra = ONE_NODE[backend.name]
    trials = len(sizes) * copies
    name = f"rdv-node-{int(time.time()) % 100000}"
    path = study(backend, tmp_path, name, sizes=sizes, copies=copies, hold=6, extra=extra)
    done = bed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["succeeded"] == trials and json.loads(done.stdout)["failed"] == 0
    attempts = {trial: a[-1] for trial, a in backend.records(name).items()}
    records = {trial: records for trial, (_, records) in outcome(tmp_path, name).items()}
    assert len(records) == trials and all(len(r) == 1 for r in records.values()), records
    assert sorted(r[0]["world_size"] for r in records.values()) == sorted(list(sizes) * copies)
    nodes = {node for r in records.values() for node in r[0]["nodes"]}
    if backend.name == "slurm":
        assert nodes == {"sn4"} and all(r[0]["nodes"] == ["sn4", "sn4"] for r in records.values()), records
        assert all(m.startswith("127.0.0.1:") for m in masters_of(records)), records  # sn4's NodeAddr
    else:
        assert len(backend.addresses()) == 1  # the NodeManagers share one host: every trial on one node
    masters = {trial: r[0]["master"] for trial, r in records.items()}
    assert len(set(masters.values())) == trials, masters
    assert all(masters[t] == f"{records[t][0]['addrs'][0]}:{backend.port(attempts[t])}" for t in masters), masters
    assert all(r[0]["heard"] == list(range(1, r[0]["world_size"])) for r in records.values())
    # each rank 0 listened from its first moment until `hold` seconds after it met its
    # peers: the windows have a moment in common
    windows = [r[0]["listening"] for r in records.values()]
    assert max(w[0] for w in windows) < min(w[1] + 6 for w in windows), windows


def test_a_preempted_trial_rendezvouses_again(backend, tmp_path):
    """Slurm: one trial of 2 tasks x 4 GPUs meets; a prod job aimed at a node it holds
    preempts it; Slurm requeues the job, which meets again, resuming, on the same port.
    YARN: two trials of 2 containers x 2 GPUs fill the 8 GPUs in research; once both met, a
    prod application takes 4 GPUs back; the gang AM ends a preempted attempt, and the
    trial's next attempt (a new application, a new port) meets again, resuming."""
    bed = backend.bed
    name = f"rdv-preempt-{int(time.time()) % 100000}"
    copies, gpus = (1, 4) if backend.name == "slurm" else (2, 2)
    path = study(backend, tmp_path, name, sizes=(2,), copies=copies, hold=20, gpus=gpus)
    bed.wait_idle()
    loop = bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)

    def all_met():
        seen = outcome(tmp_path, name) if (tmp_path / "stratctl-out" / name).is_dir() else {}
        return len(seen) == copies and all(records for _, records in seen.values())

    bed.wait("every trial met", all_met, timeout=120)
    node = None
    if backend.name == "slurm":  # aimed at a node its job holds: other work on the testbed does not take it
        gpu_jobs = [j for j in bed.jobs(name) if "gpu" in str(j.get("tres_per_task")) and j["job_state"] == "RUNNING"]
        node = bed.run("scontrol", "show", "hostnames", gpu_jobs[0]["nodes"]).stdout.split()[0]
    backend.preempt(tmp_path, name, node)
    if backend.preemption == "requeue":
        bed.wait("the trial requeued", lambda: [j for j in bed.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == copies and json.loads(out)["failed"] == 0
    seen = outcome(tmp_path, name)
    if backend.preemption == "requeue":
        [(trial, _)] = seen.items()
        result, records = seen[trial]
        assert [r["resumed"] for r in records] == [False, True], records  # met before, and again after the requeue
        assert all(r["rendezvous"] == "ok" and r["heard"] == [1] for r in records)
        assert records[0]["master"] == records[1]["master"]  # the same job: the same port, bound again
        assert result["resumed"] is True
        assert f"trial {trial}: preempted, requeued by {backend.title}" in err
        return
    preempted = {trial: a for trial, a in backend.records(name).items() if len(a) > 1}
    assert preempted, "no trial was preempted"
    for trial, attempts in preempted.items():
        first, last = attempts[0], attempts[-1]
        assert "stratctl: preempted" in first["diagnostics"], first
        result, records = seen[trial]
        # met in the attempt preempted, and again in the next one, resuming, on its own port
        assert [r["resumed"] for r in records] == [False] * (len(records) - 1) + [True], records
        assert all(r["rendezvous"] == "ok" and r["heard"] == [1] for r in records), records
        assert records[0]["master"].endswith(f":{backend.port(first)}")
        assert records[-1]["master"].endswith(f":{backend.port(last)}")
        assert backend.port(first) != backend.port(last)
        assert result["resumed"] is True
        assert f"trial {trial}: attempt {len(attempts) - 1} submitted (attempt {len(attempts) - 2} preempted)" in err


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


def test_a_slurm_trial_of_two_roles_is_one_heterogeneous_job_whose_every_task_meets_even_after_preemption(
    slurm, tmp_path
):
    """Slurm's own: a trial of a CPU-only `ps` and two 4-GPU workers is a heterogeneous job
    of two components; every task meets rank 0 (the ps) through the contract, each role's
    hosts its own component's; a prod job preempts it, Slurm requeues the whole job, and
    its tasks meet again."""
    backend = Slurm(slurm)
    name = f"rdv-roles-{int(time.time()) % 100000}"
    path = tmp_path / "study.yaml"
    path.write_text(ROLES.format(name=name, program=PROGRAM))
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)

    def met():
        seen = outcome(tmp_path, name) if (tmp_path / "stratctl-out" / name).is_dir() else {}
        return next((trial for trial, (_, records) in seen.items() if records), None)

    trial = slurm.wait("the trial's tasks met", met, timeout=120)
    gpu_jobs = [j for j in slurm.jobs(name) if "gpu" in str(j.get("tres_per_task")) and j["job_state"] == "RUNNING"]
    node = slurm.run("scontrol", "show", "hostnames", gpu_jobs[0]["nodes"]).stdout.split()[0]
    backend.preempt(tmp_path, name, node)  # a prod job asking for all 4 GPUs of a node the job holds
    jobs = slurm.jobs(name)
    assert sorted(j["het_job_offset"] for j in jobs) == [0, 1], jobs  # one job of two components
    slurm.wait("the trial requeued", lambda: [j for j in slurm.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 1 and json.loads(out)["failed"] == 0
    addr_of = backend.addresses()
    result, records = outcome(tmp_path, name)[trial]
    assert [r["resumed"] for r in records] == [False, True], records
    for record in records:
        assert record["rendezvous"] == "ok" and record["heard"] == [1, 2]
        assert record["roles"] == {"ps": 1, "worker": 2}  # STRATCTL_PS_*, STRATCTL_WORKER_* agreed by all
        assert record["addrs"] == [addr_of[node] for node in record["nodes"]], record
        assert record["nodes"][1] != record["nodes"][2]  # 4 GPUs a worker: one a node
    assert result["resumed"] is True
    assert f"trial {trial}: preempted, requeued by Slurm" in err
    assert len(slurm.jobs(name)) == 2  # the same job, requeued: nothing resubmitted
