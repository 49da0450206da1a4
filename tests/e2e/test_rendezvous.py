"""The rendezvous contract on the Kubernetes testbed, both workloads, done by the restricted
user bound to the shipped RBAC (testbed/rbac.yaml, what `stratctl rbac` prints): every pod of
a 2-pod trial has a hostname and a subdomain; a headless Service of that name selects exactly
the trial's pods and goes away with the trial (deleted by the garbage collector with its job,
by `drain`, by `delete`); MASTER_ADDR is rank 0's DNS name and the ranks are distinct.

KWOK runs no process, so what a container would see is worked out from the pod objects as the
kubelet does it (tests/kubelet.py: the downward API, `$(NAME)`, and the rank wrapper's
/bin/sh run for real). The API server's audit log must show no request of the restricted user
it forbade.
"""

from __future__ import annotations

import time

import pytest

from stratctl import labels, rendezvous
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, POD, SERVICE, VOLCANO_JOB
from stratctl.errors import NotFound
from tests.e2e.support import Cli, fake_study, finish, running_pods, unique, wait_until
from tests.e2e.test_rbac import audit_log, forbidden, requests_since
from tests.kubelet import started

pytestmark = pytest.mark.e2e

KIND = {"volcano": VOLCANO_JOB, "batch": BATCH_JOB}


def services(api, name: str) -> dict:
    """The Service `name`, or {} when there is none."""
    try:
        return api.get(SERVICE, name)
    except NotFound:
        return {}


def trial_pods(api, trial: str, attempt: int) -> list[dict]:
    """The running pods of one attempt, by their stratctl labels."""
    return running_pods(api, f"{labels.TRIAL}={trial},{labels.ATTEMPT}={attempt}")


def check_attempt(api, trial: str, attempt: int, size: int) -> None:
    """The attempt's pods find each other: hostname and subdomain on each, the headless
    Service of that name selecting exactly them, MASTER_ADDR rank 0's name, distinct ranks."""
    job = trial if attempt == 0 else f"{trial}-a{attempt}"
    pods = wait_until(
        lambda: (p := trial_pods(api, trial, attempt)) and len(p) == size and p,
        90,
        message=f"the {size} pods of {job} running",
    )
    subdomains = {pod["spec"].get("subdomain") for pod in pods}
    assert subdomains == {job}, subdomains
    assert all(pod["spec"].get("hostname") for pod in pods)
    service = wait_until(lambda: services(api, job), 30, message=f"the Service {job}")
    assert service["spec"]["clusterIP"] == "None"  # headless: each pod's own address under its name
    selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
    selected = api.list(POD, label_selector=selector)[0]
    assert sorted(p["metadata"]["name"] for p in selected) == sorted(p["metadata"]["name"] for p in pods)
    seen = {}
    for pod in pods:
        env = started(pod, pod["spec"]["containers"][0])
        seen[int(env[rendezvous.RANK])] = (pod, env)
        assert env[rendezvous.NODE_RANK] == env[rendezvous.RANK]
        assert env[rendezvous.WORLD_SIZE] == env[rendezvous.NUM_NODES] == str(size)
        assert env[rendezvous.MASTER_PORT] == str(rendezvous.FIXED_PORT)
    assert sorted(seen) == list(range(size)), "distinct ranks 0..N-1"
    names = [f"{seen[r][0]['spec']['hostname']}.{seen[r][0]['spec']['subdomain']}" for r in range(size)]
    for _pod, env in seen.values():
        assert env[rendezvous.MASTER_ADDR] == names[0]  # rank 0's DNS name
        assert env[rendezvous.NODE_ADDRS].split(",") == names


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_a_two_pod_trials_pods_find_each_other_under_a_headless_service_that_goes_with_it(
    testbed, api, studies, workload
):
    log = audit_log(testbed)
    start = log.stat().st_size
    cli = Cli(testbed, context=testbed.restricted_context)
    name = unique(f"rdv-{workload[:3]}")
    path = studies(name, fake_study(name, testbed.namespace, 2, "120s", replicas=2, fields={"workload": workload}))
    cli.run("submit", path, "--dry-run=server")
    cli.run("submit", path, "--detach")
    jobs = wait_until(
        lambda: (j := api.list(KIND[workload], label_selector=f"{labels.STUDY}={name}")[0]) and len(j) == 2 and j,
        60,
        message="both trials' jobs",
    )
    kept, collected = sorted(j["metadata"]["name"] for j in jobs)
    for job in (kept, collected):
        check_attempt(api, job, 0, 2)

    # the garbage collector: the job goes, its Service goes with it
    api.delete(KIND[workload], collected)
    wait_until(lambda: not services(api, collected), 60, message=f"the Service {collected} collected with its job")

    # drain: the attempt's job is deleted, and its Service; resume: the next attempt has its own
    cli.run("drain", name)
    wait_until(lambda: not services(api, kept), 60, message=f"the Service {kept} gone with the drained job")
    cli.run("resume", name)
    resumed = [j["metadata"]["name"] for j in api.list(KIND[workload], label_selector=f"{labels.STUDY}={name}")[0]]
    assert f"{kept}-a1" in resumed, resumed
    check_attempt(api, kept, 1, 2)

    # delete: every object of the study, its Services with them
    cli.run("delete", name, "--yes")
    assert not services(api, f"{kept}-a1")
    assert api.list(SERVICE, label_selector=f"{labels.STUDY}={name}")[0] == []
    events = requests_since(log, start, "trial-runner")
    assert len(events) > 20, "the audit log saw the restricted user's requests"
    assert forbidden(events) == [], "requests the shipped RBAC forbids"


def test_a_volcano_trial_of_roles_ranks_them_in_task_order(testbed, api, studies):
    """ps (one pod: rank 0), workers (two pods after it: their ranks 1 and 2 are added by the
    shell wrapper, run here for real on what the pods carry), a log collector outside the
    gang (rank 3: the gang is the other three)."""
    cli = Cli(testbed, context=testbed.restricted_context)
    name = unique("rdv-roles")
    tasks = "[{name: ps, replicas: 1}, {name: worker, replicas: 2}, {name: logs, replicas: 1, min_available: 0}]"
    path = studies(
        name,
        fake_study(name, testbed.namespace, 1, "60s", tasks=tasks).replace(
            "  image: stratctl.invalid/fake-trial:0\n", "  image: stratctl.invalid/fake-trial:0\n  command: [train]\n"
        ),
    )
    cli.run("submit", path, "--detach")
    [job] = wait_until(lambda: api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")[0], 60, message="the job")
    job_name = job["metadata"]["name"]
    assert (job["spec"]["minAvailable"], [t["minAvailable"] for t in job["spec"]["tasks"]]) == (3, [1, 2, 0])
    check_attempt(api, job_name, 0, 4)
    roles = {}
    for pod in trial_pods(api, job_name, 0):
        env = started(pod, pod["spec"]["containers"][0])
        roles[int(env[rendezvous.RANK])] = (env[rendezvous.TASK], env[rendezvous.TASK_INDEX], pod["spec"]["hostname"])
    assert roles == {
        0: ("ps", "0", f"{job_name}-ps-0"),
        1: ("worker", "0", f"{job_name}-worker-0"),
        2: ("worker", "1", f"{job_name}-worker-1"),
        3: ("logs", "0", f"{job_name}-logs-0"),
    }
    cli.run("delete", name, "--yes")


def test_a_trial_ends_when_its_workers_complete_while_its_ps_pods_still_run(testbed, api, studies, tmp_path):
    """The workers' task-level `TaskCompleted -> CompleteJob`: the ps pod never exits (no run
    duration: KWOK keeps it running), and the trial succeeds once both workers have. The
    control, without the policy: the workers done, the job still runs."""
    from stratctl.core.render import bundled_templates

    (tmp_path / "tpl").mkdir()
    text = (bundled_templates() / "volcano-job.yaml.j2").read_text()
    forever = "        annotations: {{ (spec.trial.annotations if task.name != 'ps' else {}) | tojson }}\n"
    (tmp_path / "tpl" / "job.yaml.j2").write_text(
        text.replace("        annotations: {{ spec.trial.annotations | tojson }}\n", forever)
    )
    cli = Cli(testbed, context=testbed.restricted_context)

    def study(name: str, policies: str) -> str:
        tasks = f"[{{name: ps, replicas: 1}}, {{name: worker, replicas: 2{policies}}}]"
        text = fake_study(name, testbed.namespace, 1, "3s", tasks=tasks).replace(
            "  image: stratctl.invalid/fake-trial:0\n",
            "  image: stratctl.invalid/fake-trial:0\n  command: [train]\n  template: job.yaml.j2\n",
        )
        return studies(name, text + f"templates_dir: {tmp_path / 'tpl'}\n")

    control = unique("rdv-ps0")
    cli.run("submit", study(control, ""), "--detach")
    name = unique("rdv-ps")
    run = cli.start(
        "submit",
        study(name, ", policies: [{event: TaskCompleted, action: CompleteJob}]"),
        "-o",
        "json",
        "--poll-interval",
        "1",
    )
    ps = wait_until(
        lambda: running_pods(api, f"{labels.STUDY}={name},volcano.sh/task-spec=ps"), 60, message="the ps pod running"
    )
    assert "testbed.stratctl.io/run-duration" not in (ps[0]["metadata"].get("annotations") or {})
    assert finish(run, timeout=120)["succeeded"] == 1
    [job] = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")[0]
    assert job["status"]["state"]["phase"] == "Completed"

    def workers_done() -> bool:
        pods = api.list(POD, label_selector=f"{labels.STUDY}={control},volcano.sh/task-spec=worker")[0]
        return len(pods) == 2 and all(p["status"].get("phase") == "Succeeded" for p in pods)

    wait_until(workers_done, 60, message="the control's workers succeeded")
    time.sleep(3)  # Volcano acts on a TaskCompleted within a second
    [job] = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={control}")[0]
    assert job["status"]["state"]["phase"] == "Running"
    assert running_pods(api, f"{labels.STUDY}={control},volcano.sh/task-spec=ps")
