"""Trials whose processes really run: on a node whose kubelet starts containers (the local
testbed's real node, `stratctl-real-0`, or any such node of another cluster), never on
KWOK's. A trial prints a line and calls `stratctl.trial.result(...)` in the image that has
stratctl (testbed: `stratctl.local/python:3.11`, STRATCTL_TEST_PYTHON_IMAGE elsewhere);
its result comes back through the container's termination message and its line through
`stratctl logs`. Skipped, saying why, only when no node of the cluster runs processes.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.e2e.conftest import REAL_KEY
from tests.e2e.support import GPU, Cli, finish, unique, wait_until

pytestmark = pytest.mark.e2e

IMAGE = os.environ.get("STRATCTL_TEST_PYTHON_IMAGE", "stratctl.local/python:3.11")


def real_study(name: str, namespace: str, node: str, gpus: int) -> str:
    """Two one-pod trials on `node` (its taint tolerated), one GPU each when it has them:
    each prints a line with its seed and the host it ran on, then its result."""
    program = textwrap.dedent("""\
        import socket
        from stratctl import trial
        seed = {{ params.seed }}
        print(f"real trial seed={seed} ran on {socket.gethostname()}", flush=True)
        trial.result(loss=seed / 10, seed=seed, host=socket.gethostname())
        """)
    gpu = f", {GPU}: 1" if gpus else ""
    limits = f", limits: {{{GPU}: 1}}" if gpus else ""
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          seed: {{type: int, low: 1, high: 2}}
        strategy: {{kind: grid}}
        trial:
          image: {IMAGE}
          command: ["python3", "-c"]
          args: [{json.dumps(program)}]
          node_selector: {{kubernetes.io/hostname: {node}}}
          tolerations: [{{key: {REAL_KEY}, operator: Exists, effect: NoSchedule}}]
          resources: {{requests: {{cpu: 100m, memory: 64Mi{gpu}}}{limits}}}
          tasks: [{{name: worker, replicas: 1}}]
        throttle: {{qps: 20, burst: 10, parallelism: {{min: 1, initial: 2, max: 2}}}}
        """)


def test_a_trial_runs_on_the_real_node_and_its_result_and_line_come_back(testbed, real_node, studies):
    node, gpus = real_node
    name = unique("real")
    path = studies(name, real_study(name, testbed.namespace, node, gpus))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)

    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=240)
    assert (progress["succeeded"], progress["failed"]) == (2, 0), progress

    snapshot = cli.status(name)
    results = {t["params"]["seed"]: t["result"] for t in snapshot["trials"]}
    # the hostname a pod sees is its own name; what matters: the process ran and wrote it
    assert {seed: {k: v for k, v in r.items() if k != "host"} for seed, r in results.items()} == {
        1: {"loss": 0.1, "seed": 1},
        2: {"loss": 0.2, "seed": 2},
    }, snapshot["trials"]
    for trial in snapshot["trials"]:
        seed, host = trial["params"]["seed"], trial["result"]["host"]
        out = cli.run("logs", name, trial["trial"])
        assert f"real trial seed={seed} ran on {host}" in out, out


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.fixture
def scripts(api, testbed):
    """`scripts(name, *files)`: a ConfigMap `name` in the test namespace holding the given
    examples files (path relative to examples/), for a trial to mount at /scripts; deleted
    afterwards. How a user ships a small script without building an image."""
    from stratctl.backends.kubernetes.api.resources import CONFIGMAP

    made: list[str] = []

    def make(name: str, *files: str) -> str:
        data = {}
        for rel in files:
            with open(os.path.join(EXAMPLES, rel)) as f:
                data[os.path.basename(rel)] = f.read()
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": testbed.namespace},
                "data": data,
            }
        )
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            api.delete(CONFIGMAP, name)
        except Exception:
            pass


def on_real_node(node: str) -> str:
    """The trial fields that put its pods on `node` (its taint tolerated)."""
    return (
        f"  node_selector: {{kubernetes.io/hostname: {node}}}\n"
        f"  tolerations: [{{key: {REAL_KEY}, operator: Exists, effect: NoSchedule}}]\n"
    )


@pytest.mark.parametrize(
    ("workload", "tasks", "ranks"),
    [
        ("volcano", "[{name: ps, replicas: 1}, {name: worker, replicas: 2}]", {"ps": 1, "worker": 2}),
        ("batch", "[{name: worker, replicas: 2}]", {"worker": 2}),
    ],
)
def test_the_ranks_of_a_real_trial_meet_rank_0_by_its_dns_name(
    testbed, real_node, studies, scripts, workload, tasks, ranks
):
    """examples/rendezvous/rendezvous_check.py in every pod: rank 0 listens on
    MASTER_ADDR:MASTER_PORT (its DNS name under the trial's headless Service), every other
    rank connects by that name and is heard once; rank 0's record is the trial's result."""
    node, _ = real_node
    name = unique(f"rrdv-{workload[:3]}")
    config = scripts(name, "rendezvous/rendezvous_check.py")
    study = (
        f"name: {name}\n"
        f"namespace: {testbed.namespace}\n"
        "queue: default\n"
        "priority_class: stratctl-low\n"
        f"workload: {workload}\n"
        "space:\n"
        "  seed: {type: int, low: 1, high: 1}\n"
        "strategy: {kind: grid}\n"
        "trial:\n"
        f"  image: {IMAGE}\n"
        '  command: ["python3", "/scripts/rendezvous_check.py", "--timeout", "90"]\n'
        f"{on_real_node(node)}"
        "  resources: {requests: {cpu: 50m, memory: 32Mi}}\n"
        f"  volumes: [{{name: scripts, config_map: {{name: {config}}}}}]\n"
        "  volume_mounts: [{name: scripts, mount_path: /scripts}]\n"
        f"  tasks: {tasks}\n"
        "throttle: {qps: 20, burst: 10, parallelism: {min: 1, initial: 1, max: 1}}\n"
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=240)
    assert (progress["succeeded"], progress["failed"]) == (1, 0), progress

    (trial,) = cli.status(name)["trials"]
    result = trial["result"]
    size = sum(ranks.values())
    assert (result["rendezvous"], result["world_size"], result["peers_heard"]) == ("ok", size, size - 1), result
    host, port = result["master"].rsplit(":", 1)
    # rank 0's name under the trial's headless Service (<pod hostname>.<job>), resolved by
    # the cluster's DNS in the other pods; the port is stratctl's fixed one
    assert host.count(".") == 1 and host.split(".")[1].startswith(trial["trial"]), result
    assert int(port) == 29500, result


CURVE = textwrap.dedent("""\
    import importlib.util, os, time
    from stratctl import trial
    client = importlib.util.find_spec("kubernetes") is not None
    token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
    x, y = {{ params.x }}, {{ params.y }}
    final = (x - 2) ** 2 + (y - 3) ** 2 / 10
    for step in range(STEPS):
        trial.report(step, loss=final + 1 / (step + 1))
        time.sleep(0.75)
    trial.result(loss=final, client=client, token=token)
    """)


def test_reports_printed_by_real_trials_reach_the_median_pruner(testbed, real_node, studies, api):
    """A TPE study with the median pruner whose trials call `stratctl.trial.report()` in the
    image, which has no Kubernetes client and no service account token: their report lines
    reach the loop through pods/log, at least one trial is pruned, and its pod goes."""
    from tests.e2e.test_search import jobs_of, told_of

    node, _ = real_node
    name = unique("rprune")
    steps, budget = 20, 9
    study = (
        textwrap.dedent(f"""\
        name: {name}
        namespace: {testbed.namespace}
        queue: default
        priority_class: stratctl-low
        space:
          x: {{type: uniform, low: -5, high: 10}}
          y: {{type: uniform, low: 0, high: 15}}
        strategy: {{kind: tpe, trials: {budget}, seed: 7}}
        objective: {{metric: loss, direction: minimize}}
        pruner: {{kind: median, startup_trials: 3, warmup_steps: 1}}
        trial:
          image: {IMAGE}
          command: ["python3", "-c"]
          args: [{json.dumps(CURVE.replace("STEPS", str(steps)))}]
        """)
        + on_real_node(node)
        + textwrap.dedent("""\
          resources: {requests: {cpu: 50m, memory: 32Mi}}
          tasks: [{name: worker, replicas: 1}]
        throttle: {qps: 20, burst: 10, parallelism: {min: 1, initial: 3, max: 3}}
        """)
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=400)

    told = told_of(api, name)
    pruned = {t for t, e in told.items() if e["state"] == "pruned"}
    assert pruned, f"no trial was pruned: {told}"
    assert progress["pruned"] == len(pruned) and progress["succeeded"] == budget - len(pruned), progress
    jobs = {j["metadata"]["labels"]["stratctl.io/trial"] for j in jobs_of(api, name)}
    assert not pruned & jobs  # their jobs deleted: their pods and processes went with them
    for trial in pruned:
        entry = told[trial]
        x, y = entry["params"]["x"], entry["params"]["y"]
        # a value the process printed, at a step before its last
        assert entry["value"] == pytest.approx((x - 2) ** 2 + (y - 3) ** 2 / 10 + 1 / (entry["step"] + 1), abs=1e-5)
        assert 1 <= entry["step"] < steps - 1
    if IMAGE == "stratctl.local/python:3.11":  # the testbed's image: stratctl alone, no client, no token
        results = [t["result"] for t in cli.status(name)["trials"] if t["state"] == "succeeded"]
        assert results and all(r["client"] is False and r["token"] is False for r in results), results


# A trial that sums f(step) over STEPS steps of 0.5 s: on SIGTERM it saves its state and
# exits 143 (trial.on_preempt), and an attempt that finds a checkpoint goes on from it.
# Every process appends what it did to `attempts.jsonl` beside its checkpoints.
RESUMABLE = textwrap.dedent("""\
    import json, os, time
    from stratctl import trial
    steps = STEPS
    last = trial.latest()
    state = last.load() if last else {"step": 0, "total": 0}
    start = state["step"]
    log = os.path.join(str(trial.checkpoint_dir()), "attempts.jsonl")

    def leave():
        trial.save(dict(state), state["step"])
        said = {"attempt": os.environ["STRATCTL_ATTEMPT"], "from": start, "saved": state["step"]}
        with open(log, "a") as f:
            f.write(json.dumps(said) + "\\n")

    trial.on_preempt(leave)
    print(f"attempt {os.environ['STRATCTL_ATTEMPT']} from step {start}", flush=True)
    while state["step"] < steps:
        time.sleep(0.5)
        state["total"] += state["step"] * state["step"] + {{ params.seed }}
        state["step"] += 1
        print(f"step {state['step']}", flush=True)
    with open(log, "a") as f:
        f.write(json.dumps({"attempt": os.environ["STRATCTL_ATTEMPT"], "from": start, "done": steps}) + "\\n")
    trial.result(total=state["total"], resumed_from=start)
    """)


def uninterrupted(steps: int, seed: int) -> int:
    return sum(s * s + seed for s in range(steps))


def kubectl(testbed, *args: str, manifest: dict | None = None) -> str:
    """kubectl as the admin (for what stratctl's adapter does not manage: volumes)."""
    import subprocess

    assert testbed.kubectl, "no kubectl (the testbed's, or on PATH)"
    done = subprocess.run(
        [testbed.kubectl, "--kubeconfig", testbed.kubeconfig, "--context", testbed.admin_context, *args],
        input=json.dumps(manifest) if manifest is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def host_volume(testbed, tmp_path_factory):
    """`host_volume(name)`: a PersistentVolume on a directory of this machine (hostPath: the
    real node is this machine) and a claim `name` bound to it in the test namespace, as a
    cluster admin provides one (`directory`: an existing one, else a new empty one); the
    directory is returned. Deleted afterwards."""
    made: list[str] = []

    def make(name: str, directory=None):
        if directory is None:
            directory = tmp_path_factory.mktemp(name)
            directory.chmod(0o777)
        volume = f"{testbed.namespace}-{name}"
        spec = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
        kubectl(
            testbed,
            "apply",
            "-f",
            "-",
            manifest={
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolume",
                        "metadata": {"name": volume},
                        "spec": {
                            **spec,
                            "capacity": {"storage": "1Gi"},
                            "persistentVolumeReclaimPolicy": "Retain",
                            "hostPath": {"path": str(directory), "type": "Directory"},
                            "claimRef": {"namespace": testbed.namespace, "name": name},
                        },
                    },
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "metadata": {"name": name, "namespace": testbed.namespace},
                        "spec": {**spec, "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}},
                    },
                ],
            },
        )
        made.append(name)
        return directory

    yield make
    for name in made:
        kubectl(testbed, "delete", "-n", testbed.namespace, "pvc", name, "--wait=false", "--ignore-not-found")
        kubectl(testbed, "delete", "pv", f"{testbed.namespace}-{name}", "--wait=false", "--ignore-not-found")


def resumable_study(name: str, namespace: str, node: str, claim: str, steps: int, grace: int = 15) -> str:
    return (
        textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          seed: {{type: int, low: 3, high: 3}}
        strategy: {{kind: grid}}
        trial:
          image: {IMAGE}
          command: ["python3", "-c"]
          args: [{json.dumps(RESUMABLE.replace("STEPS", str(steps)))}]
          volumes: [{{name: ckpt, pvc: {{claim: {claim}}}}}]
          volume_mounts: [{{name: ckpt, mount_path: /ckpt}}]
        """)
        + on_real_node(node)
        + textwrap.dedent(f"""\
          resources: {{requests: {{cpu: 50m, memory: 32Mi, {GPU}: 1}}, limits: {{{GPU}: 1}}}}
          tasks: [{{name: worker, replicas: 1}}]
        checkpoint: {{location: "/ckpt/{{{{ trial }}}}", grace_seconds: {grace}}}
        throttle: {{qps: 20, burst: 10, parallelism: {{min: 1, initial: 1, max: 1}}}}
        """)
    )


def first_trial(cli: Cli, study: str) -> str:
    """The name of the study's first trial, once its submit loop has recorded it (`status`
    fails until then)."""

    def created():
        listed = cli.call("status", study, "-o", "json")
        return listed.returncode == 0 and json.loads(listed.stdout)["trials"]

    return wait_until(created, 60, message="the trial created")[0]["trial"]


def attempts_of(directory) -> list[dict]:
    found = list(directory.glob("*/attempts.jsonl"))
    return [json.loads(line) for f in found for line in f.read_text().splitlines()]


def real_gang(api, namespace: str, name: str, node: str, gpus: int) -> None:
    """A production gang at stratctl-high that needs every GPU of the real node for 5 s."""
    pod = {
        "schedulerName": "volcano",
        "restartPolicy": "Never",
        "priorityClassName": "stratctl-high",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": REAL_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "serve",
                "image": "busybox:1.36",
                "command": ["sleep", "5"],
                "resources": {"requests": {GPU: "1", "cpu": "10m"}, "limits": {GPU: "1"}},
            }
        ],
    }
    api.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulerName": "volcano",
                "queue": "default",
                "minAvailable": gpus,
                "maxRetry": 1,
                "priorityClassName": "stratctl-high",
                "tasks": [{"name": "serve", "replicas": gpus, "minAvailable": gpus, "template": {"spec": pod}}],
            },
        }
    )


def last_exit_codes(api, namespace: str, study: str, seen: dict) -> None:
    """Record in `seen` (pod → exit code) the terminated containers of the study's pods."""
    from stratctl.backends.kubernetes.api.resources import POD

    for pod in api.list(POD, label_selector=f"stratctl.io/study={study}")[0]:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            done = (status.get("state") or {}).get("terminated")
            if done:
                seen[pod["metadata"]["name"]] = done.get("exitCode")


def test_a_preempted_real_trial_saves_within_its_grace_exits_143_and_resumes_to_the_same_result(
    testbed, real_node, studies, api, host_volume
):
    from stratctl.backends.kubernetes.api.resources import VOLCANO_JOB

    node, gpus = real_node
    if gpus < 1:
        pytest.skip("the real node has no (fake) GPUs to preempt for")
    name = unique("rpre")
    directory = host_volume(name)
    steps = 24
    path = studies(name, resumable_study(name, testbed.namespace, node, name, steps))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    exits: dict[str, int] = {}
    try:
        # well into its run: then production needs every GPU of the node
        trial = first_trial(cli, name)
        wait_until(lambda: "step 6" in cli.call("logs", name, trial).stdout, 90, message="the trial at step 6")
        high = unique("prod")
        real_gang(api, testbed.namespace, high, node, gpus)

        def preempted():
            last_exit_codes(api, testbed.namespace, name, exits)
            return any(a.get("saved") for a in attempts_of(directory)) and 143 in exits.values()

        wait_until(preempted, 90, interval=0.2, message="the trial preempted: saved and exited 143")
        progress = finish(submit, timeout=300)
    finally:
        if submit.poll() is None:
            submit.kill()
        try:
            api.delete(VOLCANO_JOB, high)
        except Exception:
            pass
    assert (progress["succeeded"], progress["failed"]) == (1, 0), progress
    (trial,) = cli.status(name)["trials"]
    saved = [a for a in attempts_of(directory) if "saved" in a]
    assert len(saved) == 1 and 0 < saved[0]["saved"] < steps, attempts_of(directory)
    # the next attempt went on from the step saved, and ended where an uninterrupted run ends
    assert trial["result"] == {"total": uninterrupted(steps, 3), "resumed_from": saved[0]["saved"]}, trial
    assert (trial["preemptions"], trial["failed_attempts"]) == (1, 0), trial


def test_a_drained_real_trial_saves_and_resumes_to_the_same_result(testbed, real_node, studies, host_volume):
    """`stratctl drain` then `resume`, as the restricted user, while its submit loop runs:
    the process saves within its grace period on the SIGTERM of its pod's deletion, and the
    resumed attempt ends where an uninterrupted run ends."""
    node, _ = real_node
    name = unique("rdrn")
    directory = host_volume(name)
    steps = 20
    path = studies(name, resumable_study(name, testbed.namespace, node, name, steps))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        trial = first_trial(cli, name)
        wait_until(lambda: "step 5" in cli.call("logs", name, trial).stdout, 90, message="the trial at step 5")
        [outcome] = json.loads(cli.run("drain", name, "--settle", "1", "--json"))
        assert outcome["suspended"] == [trial], outcome
        saved = wait_until(
            lambda: [a for a in attempts_of(directory) if "saved" in a], 60, message="the drained trial's save"
        )
        assert cli.status(name)["studies"][0]["drained"]
        resumed = json.loads(cli.run("resume", name, "--json"))
        assert resumed["resumed"] == [trial] and resumed["left"] == [], resumed
        progress = finish(submit, timeout=240)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (1, 0), progress
    (row,) = cli.status(name)["trials"]
    assert 0 < saved[0]["saved"] < steps, saved
    assert row["result"] == {"total": uninterrupted(steps, 3), "resumed_from": saved[0]["saved"]}, row
    assert (row["attempt"], row["failed_attempts"]) == (1, 0), row


def test_logs_follow_streams_a_real_containers_lines_as_it_prints_them(testbed, real_node, studies):
    """`stratctl logs STUDY TRIAL -f`: each line arrives while the process runs (not at its
    end), and the command ends when the container does."""
    import subprocess
    import time

    node, _ = real_node
    name = unique("rfol")
    program = "import time\nfor i in range(12):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.5)\n"
    study = (
        f"name: {name}\nnamespace: {testbed.namespace}\nqueue: default\npriority_class: stratctl-low\n"
        "space:\n  seed: {type: int, low: 1, high: 1}\nstrategy: {kind: grid}\ntrial:\n"
        f"  image: {IMAGE}\n  command: [python3, -c]\n  args: [{json.dumps(program)}]\n"
        + on_real_node(node)
        + "  resources: {requests: {cpu: 50m, memory: 32Mi}}\n"
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    cli.run("submit", path, "--detach")
    trial = cli.status(name)["trials"][0]["trial"]
    wait_until(lambda: "tick 0" in cli.call("logs", name, trial).stdout, 60, message="the trial printing")
    follow = subprocess.Popen(cli.args("logs", name, trial, "-f"), stdout=subprocess.PIPE, text=True, env=cli.env)
    try:
        seen: list[tuple[float, str]] = []
        for line in follow.stdout:
            seen.append((time.monotonic(), line.strip()))
        assert follow.wait(timeout=30) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
    lines = [text for _, text in seen]
    assert lines[-1] == "tick 11" and lines == [f"tick {i}" for i in range(12 - len(lines), 12)], lines
    # streamed: the last lines came about 0.5 s apart, not all at once at the end
    last = [at for at, _ in seen[-4:]]
    assert last[-1] - last[0] >= 1.0, seen


def test_a_real_frameworks_processes_in_two_pods_all_reduce(testbed, real_node, studies, scripts, host_volume):
    """examples/rendezvous/jax_check.py in the 2 pods of a Volcano trial: JAX's coordinator
    on rank 0 at MASTER_ADDR:MASTER_PORT (its DNS name), both processes in an all-gather and
    an all-reduce across the pods. JAX (jax[cpu], the version the Slurm and YARN tests use)
    comes from the host's cache through a read-only volume, as a cluster's shared software
    volume would bring it."""
    import sys

    from tests.jaxenv import JAX_VERSION, jax_python

    node, _ = real_node
    if IMAGE != "stratctl.local/python:3.11" or not os.path.exists("/proc/self/ns"):
        pytest.skip("JAX reaches the pods through a hostPath volume: the testbed's real node alone")
    packages = (
        jax_python().parent.parent
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
    )
    name = unique("rjax")
    host_volume(name, packages)
    config = scripts(name, "rendezvous/jax_check.py")
    study = (
        f"name: {name}\nnamespace: {testbed.namespace}\nqueue: default\npriority_class: stratctl-low\n"
        "space:\n  seed: {type: int, low: 1, high: 1}\nstrategy: {kind: grid}\ntrial:\n"
        f"  image: {IMAGE}\n"
        '  command: ["python3", "/scripts/jax_check.py", "--timeout", "120"]\n'
        "  env: {PYTHONPATH: /jax, JAX_PLATFORMS: cpu}\n"
        + on_real_node(node)
        + "  resources: {requests: {cpu: 100m, memory: 256Mi}}\n"
        f"  volumes: [{{name: scripts, config_map: {{name: {config}}}}},\n"
        f"            {{name: jax, pvc: {{claim: {name}, read_only: true}}}}]\n"
        "  volume_mounts: [{name: scripts, mount_path: /scripts}, {name: jax, mount_path: /jax, read_only: true}]\n"
        "  tasks: [{name: worker, replicas: 2}]\n"
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=300)
    assert (progress["succeeded"], progress["failed"]) == (1, 0), progress
    (row,) = cli.status(name)["trials"]
    result = row["result"]
    assert result["rendezvous"] == "ok" and result["framework"] == f"jax {JAX_VERSION}", result
    assert result["ranks"] == [0, 1] and result["sum"] == 3, result  # one row a process, each holding rank + 1
    assert len(set(result["nodes"])) == 2, result  # two pods, two hostnames
    assert result["master"].split(":")[0].split(".")[1].startswith(row["trial"]), result


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
WHO_AM_I = textwrap.dedent("""\
    import json, os, ssl, urllib.request
    d = "/var/run/secrets/kubernetes.io/serviceaccount"
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    asked = urllib.request.Request(
        f"https://kubernetes.default.svc:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=json.dumps(review).encode(), method="POST",
        headers={"Authorization": "Bearer " + open(d + "/token").read(), "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=d + "/ca.crt")
    answer = json.load(urllib.request.urlopen(asked, context=ctx, timeout=10))
    print("user", answer["status"]["userInfo"]["username"], flush=True)
    """)


def test_a_pod_on_the_real_node_reaches_the_api_server_as_its_service_account(testbed, real_node, api):
    """What a submit loop run in the cluster needs: the `kubernetes` Service's address and
    name lead to the API server, whose certificate the pod's projected CA verifies, and the
    kubelet's projected service account token authenticates the pod as its account."""
    from stratctl.backends.kubernetes.api.resources import POD

    if not testbed.local:
        pytest.skip("the local testbed's way from pods to its API server; another cluster has its own")
    node, _ = real_node
    name = unique("rwho")
    kubectl(testbed, "create", "serviceaccount", name, "-n", testbed.namespace)
    token_volume = {
        "name": "api",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]
        },
    }
    try:
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": testbed.namespace},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": name,
                    "restartPolicy": "Never",
                    "tolerations": [{"key": REAL_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                    "volumes": [token_volume],
                    "containers": [
                        {
                            "name": "who",
                            "image": IMAGE,
                            "command": ["python3", "-c", WHO_AM_I],
                            "volumeMounts": [
                                {"name": "api", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                            ],
                        }
                    ],
                },
            }
        )
        phase = wait_until(
            lambda: (
                (api.get(POD, name).get("status") or {}).get("phase") in ("Succeeded", "Failed")
                and api.get(POD, name)["status"]["phase"]
            ),
            90,
            message="the pod ended",
        )
        out = b"".join(api.pod_log(name)).decode()
        assert phase == "Succeeded", out
        assert f"user system:serviceaccount:{testbed.namespace}:{name}" in out, out
    finally:
        api.delete(POD, name)
        kubectl(testbed, "delete", "serviceaccount", name, "-n", testbed.namespace, "--ignore-not-found")
