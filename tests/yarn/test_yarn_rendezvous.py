"""Trials whose containers are one distributed program, on a real ResourceManager and real
NodeManagers: the gang AM waits for every container of every role, then gives each the
whole rendezvous contract, and every process does a real TCP rendezvous through it
(examples/rendezvous/rendezvous_check.py: rank 0 listens on MASTER_ADDR:MASTER_PORT and must
hear every other rank exactly once, or the trial fails). Trials of 2 and of 3 containers,
of one role and of two (a ps and workers, containers of different sizes); two trials on
one node at the same time on their own ports; a preempted trial meets again in its next
attempt."""

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
backend: yarn
yarn: {{resource_managers: ["{rm}"], queue: research}}
space:
  workers: {{type: choice, values: {sizes}}}
  seed: {{type: int, low: 0, high: {last_copy}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["python3", "{program}", "--timeout", "60", "--hold", "{hold}", "--history", "{history}"]
  resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: "{{{{ params.workers }}}}"}}]
throttle: {{parallelism: {{min: 1, initial: 4, max: 4}}}}
"""


def history(tmp_path: Path, name: str) -> str:
    """Where rank 0 appends each rendezvous it completed: the trial's output directory,
    absolute (a container starts in its NodeManager's work directory)."""
    return f"{tmp_path}/stratctl-out/{name}/{{{{ trial }}}}/rendezvous.jsonl"


def study(yarn, tmp_path, name, sizes=(2, 3), copies=1, hold=0, gpus=0):
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            name=name,
            rm=yarn.rm,
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
    for trial in (tmp_path / "stratctl-out" / name).iterdir():
        log = trial / "rendezvous.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        result = trial / "result.json"
        out[trial.name] = (json.loads(result.read_text()) if result.exists() else None, records)
    return out


def tag(app: dict, key: str) -> str:
    return next(t.split(":", 1)[1] for t in app["applicationTags"].split(",") if t.startswith(f"stratctl-{key}:"))


def port_of(app: dict) -> int:
    """The port stratctl derives for an application: from its sequence number."""
    return rendezvous.derived_port(int(app["id"].rsplit("_", 1)[1]))


def node_hosts(yarn) -> set[str]:
    """Each NodeManager's host, as the RM reports it (the address of a node in the contract)."""
    return {n["nodeHostName"] for n in yarn.get("nodes")["nodes"]["node"]}


def used(app: dict) -> tuple[int, int, int]:
    """Memory (MB), vcores and GPUs an application holds (its AM's container included)."""
    gpus = sum(
        i["value"]
        for p in app["resourceInfo"]["resourceUsagesByPartition"]
        for i in p["used"]["resourceInformations"]["resourceInformation"]
        if i["name"] == "yarn.io/gpu"
    )
    return app["allocatedMB"], app["allocatedVCores"], gpus


def test_the_example_trials_of_a_ps_and_workers_meet_through_the_contract(yarn, tmp_path):
    """The example study as shipped (a 256 MB CPU-only ps, 512 MB 2-vcore 1-GPU workers: one
    trial of 2 containers, one of 3), its program run from this checkout: each role's
    containers of its own size, rank 0 the ps, every rank heard once, on its application's port."""
    name = f"rdv-roles-{int(time.time()) % 100000}"
    text = (EXAMPLE / "yarn.yaml").read_text().replace("name: rendezvous-yarn", f"name: {name}")
    text = text.replace("http://127.0.0.1:28088", yarn.rm)
    text = text.replace(
        '"$STRATCTL_OUTPUT_DIR/../../../examples/rendezvous/rendezvous_check.py"',
        f'{PROGRAM} --hold 4 --history "$STRATCTL_OUTPUT_DIR/rendezvous.jsonl"',
    )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    loop = yarn.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    held: dict[str, tuple[int, int, int]] = {}

    def both_seen_running():  # while rank 0 holds: what each whole gang holds
        for app in yarn.apps(name):
            if app["state"] == "RUNNING" and app["progress"] >= 50 and app["runningContainers"] >= 3:
                held.setdefault(tag(app, "trial"), used(app))
        return len(held) == 2

    yarn.wait("both gangs running", both_seen_running, timeout=120)
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 2 and json.loads(out)["failed"] == 0
    apps = {tag(a, "trial"): a for a in yarn.apps(name)}
    hosts = node_hosts(yarn)
    sizes = {}
    for trial, (result, [record]) in outcome(tmp_path, name).items():
        n = record["world_size"]
        sizes[n] = trial
        master = f"{record['addrs'][0]}:{port_of(apps[trial])}"
        assert result == {
            "rendezvous": "ok",
            "world_size": n,
            "peers_heard": n - 1,
            "master": master,
            "resumed": False,
        }, result
        assert record["heard"] == list(range(1, n))  # every other rank, once
        assert record["roles"] == {"ps": 1, "worker": n - 1}  # the ps first: rank 0
        assert set(record["addrs"]) <= hosts and record["nodes"] == record["addrs"], record  # the NMs' hosts
    assert sorted(sizes) == [2, 3]
    # the AM (256 MB, 1 vcore) + the ps (256 MB, 1 vcore) + each worker (512 MB, 2 vcores, 1 GPU)
    assert held[sizes[2]] == (256 + 256 + 512, 1 + 1 + 2, 1), held
    assert held[sizes[3]] == (256 + 256 + 2 * 512, 1 + 1 + 2 * 2, 2), held
    shown = json.loads(yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)
    assert sorted(r["result"]["world_size"] for r in shown["trials"]) == [2, 3]


def test_trials_of_2_and_3_on_one_node_at_the_same_time_do_not_collide(yarn, tmp_path):
    """Four trials of one role (2 and 3 workers, twice) running at once on the testbed's
    NodeManagers, which share one host: each rank 0 listens on its own application's port."""
    name = f"rdv-node-{int(time.time()) % 100000}"
    path = study(yarn, tmp_path, name, sizes=(2, 3), copies=2, hold=6)
    done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["succeeded"] == 4 and json.loads(done.stdout)["failed"] == 0
    apps = {tag(a, "trial"): a for a in yarn.apps(name)}
    records = {trial: records for trial, (_, records) in outcome(tmp_path, name).items()}
    assert len(records) == 4 and all(len(r) == 1 for r in records.values()), records
    assert sorted(r[0]["world_size"] for r in records.values()) == [2, 2, 3, 3]
    assert len(node_hosts(yarn)) == 1  # the testbed's NodeManagers share one host: every trial on one node
    masters = {trial: r[0]["master"] for trial, r in records.items()}
    assert len(set(masters.values())) == 4, masters
    assert all(masters[t] == f"{records[t][0]['addrs'][0]}:{port_of(apps[t])}" for t in masters), (masters, apps)
    assert all(r[0]["heard"] == list(range(1, r[0]["world_size"])) for r in records.values())
    # each rank 0 listened from its first moment until `hold` seconds after it met its peers:
    # the four windows have a moment in common
    windows = [r[0]["listening"] for r in records.values()]
    assert max(w[0] for w in windows) < min(w[1] + 6 for w in windows), windows


def test_a_preempted_trial_rendezvouses_again_in_its_next_attempt(yarn, tmp_path):
    """Two trials of 2 containers x 2 GPUs fill the 8 GPUs in research; once both have met,
    a prod application takes 4 GPUs back: YARN preempts research containers, the gang AM
    ends the attempt as preempted, and the trial's next attempt (a new application, a new
    port) meets again, resuming."""
    name = f"rdv-preempt-{int(time.time()) % 100000}"
    path = study(yarn, tmp_path, name, sizes=(2,), copies=2, hold=20, gpus=2)
    yarn.wait_idle()
    loop = yarn.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)

    def both_met():
        seen = outcome(tmp_path, name) if (tmp_path / "stratctl-out" / name).is_dir() else {}
        return len(seen) == 2 and all(records for _, records in seen.values())

    yarn.wait("both trials met", both_met, timeout=120)
    urgent = tmp_path / "prod.yaml"
    urgent.write_text(
        STUDY.format(
            name=f"prod-{name}",
            rm=yarn.rm,
            sizes=[1],
            last_copy=0,
            program=PROGRAM,
            hold=0,
            history=history(tmp_path, f"prod-{name}"),
            gpus=4,
        ).replace("queue: research", "queue: prod")
    )
    prod = yarn.stratctl("submit", str(urgent), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert prod.returncode == 0 and json.loads(prod.stdout)["succeeded"] == 1, prod.stderr[-2000:]
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 2 and json.loads(out)["failed"] == 0
    apps: dict[str, list[dict]] = {}
    for app in yarn.apps(name):
        apps.setdefault(tag(app, "trial"), []).append(app)
    seen = outcome(tmp_path, name)
    preempted = {trial: attempts for trial, attempts in apps.items() if len(attempts) > 1}
    assert preempted, "no trial was preempted"
    for trial, attempts in preempted.items():
        first, last = attempts[0], attempts[-1]
        assert "stratctl: preempted" in first["diagnostics"], first
        result, records = seen[trial]
        # met in the attempt preempted, and again in the next one, resuming, on its own port
        assert [r["resumed"] for r in records] == [False] * (len(records) - 1) + [True], records
        assert all(r["rendezvous"] == "ok" and r["heard"] == [1] for r in records), records
        assert (
            records[0]["master"].endswith(f":{port_of(first)}")
            and records[-1]["master"].endswith(f":{port_of(last)}")
            and port_of(first) != port_of(last)
        )
        assert result["resumed"] is True
        assert f"trial {trial}: attempt {len(attempts) - 1} submitted (attempt {len(attempts) - 2} preempted)" in err
