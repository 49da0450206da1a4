"""`logs STUDY TRIAL` of a trial with no pods says why: no such trial (did you mean ...), not
created yet, suspended, cleaned up, or its job has not started any."""

from __future__ import annotations

import json

import pytest

from stratctl.backends.kubernetes.verbs.drain import drain
from stratctl.backends.kubernetes.verbs.logs import pods_of
from stratctl.errors import ExitCode, UsageError
from tests.unit.backends.kubernetes.test_roster import NS, started


def said(cluster, trial: str) -> str:
    with pytest.raises(UsageError) as caught:
        pods_of(cluster, NS, "loop", trial)
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    return str(caught.value)


def test_a_trial_the_study_does_not_have_is_said_so_with_the_nearest_name(study_file):
    cluster, _, trials = started(study_file)
    name = trials[4].name
    slip = name[:-1] + ("0" if name[-1] != "0" else "1")
    assert said(cluster, slip) == (
        f"study loop has no trial {slip!r} (did you mean {name}?); `stratctl status loop -o name` lists its 10 trials"
    )
    assert said(cluster, "no-such-trial") == (
        "study loop has no trial 'no-such-trial'; `stratctl status loop -o name` lists its 10 trials"
    )


def test_a_trial_not_created_yet_or_whose_job_has_no_pod_yet(study_file):
    cluster, _, trials = started(study_file)
    created = set(cluster.trial_names())
    waiting = next(t.name for t in trials if t.name not in created)
    assert said(cluster, waiting) == f"trial {waiting} of study loop has not been created yet: it has no pods"
    made = min(created)
    assert said(cluster, made) == (
        f"trial {made} of study loop has no pods in namespace {NS} yet: its job {made} has not started any "
        "(or they were cleaned up)"
    )


def test_a_suspended_or_cleaned_up_trial_says_so(study_file):
    cluster, _, _ = started(study_file)
    [outcome] = drain(cluster, NS, "loop", settle=0)
    suspended = outcome.suspended[0]
    assert said(cluster, suspended) == (
        f"trial {suspended} of study loop is suspended (drained): it has no pods until `stratctl resume loop`"
    )
    cluster.record("loop")["data"]["finished"] = json.dumps({"loop-0123456789": "succeeded"})
    assert said(cluster, "loop-0123456789") == (
        "trial loop-0123456789 of study loop succeeded and was cleaned up: its pods are gone"
    )


def test_a_study_not_in_the_namespace_is_said_as_status_says_it(study_file):
    cluster, _, _ = started(study_file)
    with pytest.raises(UsageError, match="no study 'nope' in namespace stratctl-e2e"):
        pods_of(cluster, NS, "nope", "nope-1")
