"""One driver per study on the Kubernetes testbed (run/driver.py, its Lease
objects/lease.py), as the restricted user: a second `submit` of a study a live loop drives
is refused with exit 4 naming it; `--take-over` makes the first hand over at its next
cycle and end 0, and the study goes on exactly once (every trial created once, the budget
of a closed-loop search kept)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from stratctl.backends.kubernetes.api.resources import LEASE
from stratctl.errors import NotFound
from tests.e2e.support import Cli, busybox_study, finish, unique, wait_until
from tests.e2e.test_search import search_yaml, told_of

pytestmark = pytest.mark.e2e


def jobs_per_trial(api, study: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")[0]:
        trial = job["metadata"]["labels"][labels.TRIAL]
        counts[trial] = counts.get(trial, 0) + 1
    return counts


def lease_holder(api, study: str) -> str | None:
    try:
        return api.get(LEASE, f"stratctl-driver-{study}")["spec"].get("holderIdentity")
    except NotFound:
        return None


def test_a_second_submit_is_refused_and_take_over_hands_the_study_over_exactly_once(testbed, api, studies):
    name = unique("drv")
    path = studies(name, busybox_study(name, testbed.namespace, 12, "4s", cap=3))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=60)
    first = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    second = None
    try:
        holder = f"{socket.gethostname()} pid {first.pid}"
        wait_until(lambda: lease_holder(api, name) == holder, 30, message="the first loop's mark")
        time.sleep(3)
        as_users_see_it = Cli(testbed, context=testbed.restricted_context, traceback=False)
        refused = as_users_see_it.call("submit", path, "-o", "json")
        assert refused.returncode == 4, refused.stderr
        assert f"study {name} is driven by {holder} since " in refused.stderr, refused.stderr
        assert "--take-over" in refused.stderr and "Traceback" not in refused.stderr and first.poll() is None

        second = cli.start("submit", path, "-o", "json", "--poll-interval", "1", "--take-over")
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        handed = json.loads(out)
        assert handed["handed_over"] == f"{socket.gethostname()} pid {second.pid}", handed
        assert f"handed over: study {name} is driven by" in err
        progress = finish(second, timeout=240)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert (progress["succeeded"], progress["failed"]) == (12, 0), progress
    assert progress["created"] + handed["created"] == 12  # between them, each trial created once
    assert (
        jobs_per_trial(api, name) == {t: 1 for t in jobs_per_trial(api, name)} and len(jobs_per_trial(api, name)) == 12
    )
    assert lease_holder(api, name) is None  # the loop that ended let the mark go


def test_a_search_taken_over_mid_way_asks_no_trial_twice_and_keeps_its_budget(testbed, api, studies):
    from tests.e2e.test_search import BUDGET

    name = unique("drvs")
    path = studies(name, search_yaml(name, testbed.namespace))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=60)
    first = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    second = None
    try:
        wait_until(lambda: len(told_of(api, name)) >= 3, 120, message="three trials told")
        second = cli.start("submit", path, "-o", "json", "--poll-interval", "1", "--take-over")
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0 and json.loads(out)["handed_over"], err
        progress = finish(second, timeout=300)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    told = told_of(api, name)
    assert len(told) == BUDGET and progress["succeeded"] + progress["failed"] + progress["pruned"] == BUDGET
    per_trial = jobs_per_trial(api, name)
    assert len(per_trial) == BUDGET and set(per_trial.values()) == {1}, per_trial
