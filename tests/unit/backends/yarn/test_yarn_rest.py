"""The ResourceManager's REST API as the YARN backend speaks it: HA failover past a
standby or a dead address, and every answer sorted (pressure, no answer, a verdict)."""

from __future__ import annotations

import json

import pytest
import urllib3

from stratctl.backends.yarn.rest import ResourceManager
from stratctl.errors import Invalid, NotFound, Throttled, Unavailable, Unreachable


class Answer:
    def __init__(self, status=200, body=None, headers=None):
        self.status = status
        self.data = body if isinstance(body, bytes) else json.dumps(body if body is not None else {}).encode()
        self.headers = headers or {}


class Pool:
    """Answers by address: a callable or an Answer per base URL; records each request."""

    def __init__(self, by_base):
        self.by_base, self.requests = by_base, []

    def request(self, method, url, body=None, headers=None, redirect=True):
        self.requests.append((method, url, json.loads(body) if body else None))
        base = next(b for b in self.by_base if url.startswith(b))
        answer = self.by_base[base]
        if isinstance(answer, Exception):
            raise answer
        return answer


def refused():
    return urllib3.exceptions.NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"
    )


def test_a_dead_or_standby_rm_is_passed_over_and_the_active_one_remembered():
    pool = Pool(
        {
            "http://rm1": refused(),
            "http://rm2": Answer(307, b"", {"Location": "http://rm3:8088/ws/v1"}),
            "http://rm3": Answer(200, {"apps": {"app": [{"id": "application_1_0001"}]}}),
        }
    )
    rm = ResourceManager(["http://rm1", "http://rm2", "http://rm3"], user="alice", pool=pool)
    assert rm.apps("stratctl-study:S") == [{"id": "application_1_0001"}]
    assert rm.url == "http://rm3"
    method, url, _ = pool.requests[-1]
    assert method == "GET" and "applicationTags=stratctl-study%3As" in url and "user.name=alice" in url
    before = len(pool.requests)
    rm.apps("x")
    assert len(pool.requests) == before + 1  # straight to the active one
    assert rm.calls == 2 and rm.sent == {"list": 2}


def test_a_standby_page_and_no_answer_at_all_are_unavailable():
    pool = Pool(
        {
            "http://rm1": Answer(200, b"This is standby RM. The redirect url is: http://rm2:8088/"),
            "http://rm2": refused(),
        }
    )
    rm = ResourceManager(["http://rm1", "http://rm2"], pool=pool)
    with pytest.raises(Unavailable) as err:
        rm.nodes()
    assert "http://rm1: a standby ResourceManager" in str(err.value) and "http://rm2: connection refused" in str(
        err.value
    )


@pytest.mark.parametrize(
    "status, headers, body, kind",
    [
        (429, {"Retry-After": "7"}, b"slow down", Throttled),
        (503, {}, b"busy", Throttled),
        (500, {}, b"oops", Unavailable),
        (404, {}, {"RemoteException": {"exception": "NotFoundException", "message": "app not found"}}, NotFound),
        (
            400,
            {},
            {
                "RemoteException": {
                    "exception": "BadRequestException",
                    "message": "Invalid resource request, requested resource type=[yarn.io/gpu] < 0",
                }
            },
            Invalid,
        ),
    ],
)
def test_answers_are_sorted_into_pressure_no_answer_and_verdicts(status, headers, body, kind):
    rm = ResourceManager(["http://rm1"], pool=Pool({"http://rm1": Answer(status, body, headers)}))
    with pytest.raises(kind) as err:
        rm.submit({"application-id": "application_1_0001"})
    if status == 429:
        assert err.value.retry_after == 7.0 and rm.refused == {"submissions": 1}
    if status == 400:
        assert "requested resource type=[yarn.io/gpu] < 0" in str(err.value)


def test_new_application_submit_kill_and_conf():
    pool = Pool({"http://rm1": Answer(200, {"application-id": "application_9_0003"})})
    rm = ResourceManager(["http://rm1"], pool=pool)
    assert rm.new_application() == "application_9_0003"
    rm.submit({"a": 1})
    rm.kill("application_9_0003")
    assert [(m, u.split("?")[0]) for m, u, _ in pool.requests] == [
        ("POST", "http://rm1/ws/v1/cluster/apps/new-application"),
        ("POST", "http://rm1/ws/v1/cluster/apps"),
        ("PUT", "http://rm1/ws/v1/cluster/apps/application_9_0003/state"),
    ]
    assert pool.requests[-1][2] == {"state": "KILLED"}
    pool.by_base["http://rm1"] = Answer(
        200, {"property": {"key": "yarn.application.classpath", "value": "/etc/hadoop,/lib/*", "isFinal": False}}
    )
    assert rm.conf("yarn.application.classpath") == "/etc/hadoop,/lib/*"
    pool.by_base["http://rm1"] = Answer(404, b"")
    assert rm.conf("yarn.application.classpath") is None


def test_never_reached_is_a_setup_to_fix_once_reached_a_pause_to_wait_out():
    pool = Pool({"http://rm1": refused()})
    rm = ResourceManager(["http://rm1"], pool=pool)
    with pytest.raises(Unreachable) as err:
        rm.nodes()
    assert "check yarn.resource_managers" in str(err.value)
    pool.by_base["http://rm1"] = Answer(200, {"nodes": {"node": []}})
    assert rm.nodes() == []
    pool.by_base["http://rm1"] = refused()
    with pytest.raises(Unavailable):  # it answered before: a restart or a pause, retried
        rm.nodes()


def test_an_application_is_moved_to_another_queue_by_the_cluster_application_queue_api():
    pool = Pool({"http://rm1": Answer(200, {"queue": "research"})})
    rm = ResourceManager(["http://rm1"], user="alice", pool=pool)
    rm.move("application_1_0007", "research")
    method, url, body = pool.requests[-1]
    assert method == "PUT" and url.startswith("http://rm1/ws/v1/cluster/apps/application_1_0007/queue?")
    assert body == {"queue": "research"} and rm.sent == {"move": 1}


def test_the_web_proxy_gives_a_running_ams_answer_and_none_for_an_ended_application():
    """`/proxy/<app>/<path>` forwards to a running application's tracking URL (the gang AM's
    report server); for an ended one the proxy redirects (to a tracking URL no longer
    served): that is no standby, and no answer to read."""
    lines = b'{"step":1,"values":{"loss":0.5}}\n'
    pool = Pool({"http://rm1": Answer(200, lines, {"Content-Type": "application/x-ndjson"})})
    rm = ResourceManager(["http://rm1"], user="alice", pool=pool)
    assert rm.proxied("application_1_0007", "reports") == lines.decode()
    assert pool.requests == [("GET", "http://rm1/proxy/application_1_0007/reports?user.name=alice", None)]
    assert rm.sent == {"proxy": 1}
    pool.by_base["http://rm1"] = Answer(302, b"", {"Location": "http://localhost:40000/reports"})
    assert rm.proxied("application_1_0007", "reports") is None
    assert rm.url == "http://rm1" and len(pool.requests) == 2  # not passed over as a standby
    pool.by_base["http://rm1"] = Answer(
        404, b"Application application_1_0008 could not be found in RM or history server"
    )
    with pytest.raises(NotFound):
        rm.proxied("application_1_0008", "reports")
    pool.by_base["http://rm1"] = Answer(500, b"Connection refused")  # the proxy could not reach the AM
    with pytest.raises(Unavailable):
        rm.proxied("application_1_0007", "reports")


def test_through_the_proxy_only_a_standby_rms_own_words_make_it_a_standby():
    pool = Pool(
        {
            "http://rm1": Answer(307, b"This is standby RM. The redirect url is: http://rm2/proxy/x", {}),
            "http://rm2": Answer(200, b'{"step":1,"values":{"standby":1.0}}\n'),
        }
    )
    rm = ResourceManager(["http://rm1", "http://rm2"], pool=pool)
    assert rm.proxied("application_1_0001", "reports") == '{"step":1,"values":{"standby":1.0}}\n'
    assert rm.url == "http://rm2"
