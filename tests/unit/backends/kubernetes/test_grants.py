"""A 401/403 right after the same kind of request worked is a restarting API server, not RBAC."""

from __future__ import annotations

import pytest

from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, VOLCANO_JOB, error_for
from stratctl.backends.kubernetes.api.grants import RECENT, access, denial_is_transient
from stratctl.errors import Invalid, Unavailable
from stratctl.run.throttle import Throttle
from tests.unit.fakes import FakeClock, MaxRng
from tests.unit.http_fakes import OK, Answer, cluster, forbidden, status_body


@pytest.mark.parametrize(
    "method, path, query, key",
    [
        ("GET", "/api/v1/namespaces/ns/configmaps/stratctl-study-a", None, ("get", "configmaps in ns")),
        ("GET", "/api/v1/namespaces/ns/configmaps/stratctl-study-b", None, ("get", "configmaps in ns")),
        ("GET", "/api/v1/namespaces/ns/configmaps", {"labelSelector": "x"}, ("list", "configmaps in ns")),
        ("GET", "/api/v1/pods", {"watch": "1"}, ("watch", "pods")),
        ("POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs", None, ("create", "batch.volcano.sh/jobs in ns")),
        (
            "DELETE",
            "/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/t-a1",
            None,
            ("delete", "batch.volcano.sh/jobs in ns"),
        ),
        ("PATCH", "/api/v1/namespaces/other/configmaps/c", None, ("patch", "configmaps in other")),
        ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", None, ("list", "scheduling.k8s.io/priorityclasses")),
    ],
)
def test_requests_are_remembered_by_what_rbac_authorizes(method, path, query, key):
    assert access(method, path, query) == key


@pytest.mark.parametrize(
    "status, ago, transient",
    [
        (403, 2.0, True),
        (401, 2.0, True),
        (403, RECENT, True),
        (403, None, False),  # never worked: a real RBAC problem, fail fast
        (403, RECENT + 1, False),  # worked long ago: a grant may well have been revoked since
        (404, 2.0, False),
        (422, 2.0, False),
    ],
)
def test_a_denial_is_transient_only_right_after_the_same_request_worked(status, ago, transient):
    assert denial_is_transient(status, ago) is transient


def test_error_for_says_why_a_recent_403_is_retried_and_keeps_a_real_one_permanent():
    body = status_body(403, "Forbidden", 'configmaps "s" is forbidden: User "alice" cannot get resource')
    pause = error_for(403, body, {}, "get ConfigMap s", allowed_ago=3.2)
    assert type(pause) is Unavailable and pause.status == 403
    assert str(pause) == (
        "get ConfigMap s: forbidden although the same request worked 3s ago: the API server is "
        'probably restarting (configmaps "s" is forbidden: User "alice" cannot get resource)'
    )
    verdict = error_for(403, body, {}, "get ConfigMap s")
    assert type(verdict) is Invalid and verdict.reason == "Forbidden"
    assert str(verdict) == 'get ConfigMap s: configmaps "s" is forbidden: User "alice" cannot get resource'


def test_a_restarted_server_refusing_what_worked_a_moment_ago_is_retried_until_it_allows_it_again():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    c = cluster(clock, OK, forbidden(), forbidden(), OK, gate=throttle.call)
    assert c.get(CONFIGMAP, "stratctl-study-a")["kind"] == "ConfigMap"
    clock.sleep(5)  # the API server restarts
    assert c.get(CONFIGMAP, "stratctl-study-b")["kind"] == "ConfigMap"  # another object, the same grant
    assert clock.sleeps[1:] == [0.5, 1.0]  # two retries, the throttle's backoff
    assert len(c.api.requests) == 4


def test_a_403_on_what_never_worked_fails_at_once_with_the_servers_message():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    c = cluster(
        clock,
        OK,
        forbidden('jobs.batch.volcano.sh is forbidden: User "alice" cannot create resource "jobs"'),
        gate=throttle.call,
    )
    c.get(CONFIGMAP, "stratctl-study-a")  # reading works; creating jobs never did
    manifest = {"apiVersion": VOLCANO_JOB[0], "kind": "Job", "metadata": {"name": "t", "namespace": "ns"}}
    with pytest.raises(Invalid, match='cannot create resource "jobs"') as caught:
        c.create(manifest)
    assert caught.value.reason == "Forbidden" and clock.sleeps == [] and len(c.api.requests) == 2
    assert c.outage.since is None  # the server answered: no outage


def test_a_429_is_not_an_outage():
    clock = FakeClock()
    c = cluster(clock, Answer(429, status_body(429, "TooManyRequests", "slow down"), {"Retry-After": "1"}))
    with pytest.raises(Exception, match="slow down"):
        c.get(CONFIGMAP, "a")
    assert c.outage.since is None
