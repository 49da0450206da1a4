import json

from stratctl.backends.kubernetes.api.cluster import POD
from tests.unit.fakes import FakeClock
from tests.unit.http_fakes import Answer, cluster


def test_a_list_trims_each_page_as_it_arrives():
    """`transform` runs on a page's objects before the next page is asked for: a list of
    100,000 jobs holds one page untrimmed, never all of them."""

    def page(names, token):
        return Answer(
            200,
            json.dumps(
                {
                    "items": [{"metadata": {"name": n, "managedFields": [1]}, "spec": {"big": "x"}} for n in names],
                    "metadata": {"continue": token, "resourceVersion": "7"},
                }
            ).encode(),
        )

    made = cluster(FakeClock(), page(["a", "b"], "t1"), page(["c"], ""))
    trimmed_before_next = []

    def trim(obj):
        trimmed_before_next.append((obj["metadata"]["name"], len(made.api.requests)))
        return {"name": obj["metadata"]["name"]}

    items, version = made.list(POD, transform=trim)
    assert items == [{"name": "a"}, {"name": "b"}, {"name": "c"}] and version == "7"
    assert trimmed_before_next == [("a", 1), ("b", 1), ("c", 2)]
    assert "continue=t1" in made.api.requests[1]["url"]


def test_writes_count_what_the_server_stored_and_checks_apart():
    """An access review and a dry run store nothing; a refused or failed write stored nothing
    either: `writes` is what the summary calls API writes."""
    from stratctl.backends.kubernetes.api.cluster import ApiMetrics

    m = ApiMetrics()
    m.record("POST", 201, 0.01)  # a create
    m.record("PATCH", 200, 0.01)  # a patch of the record
    m.record("POST", 201, 0.01, check=True)  # a SelfSubjectAccessReview
    m.record("POST", 201, 0.01, check=True)  # a create with dryRun=All
    m.record("POST", 429, 0.01)  # refused
    m.record("POST", 409, 0.01)  # already there
    m.record("DELETE", None, 0.01)  # no answer
    m.record("GET", 200, 0.01)
    assert (m.writes, m.checks, m.requests, m.throttled) == (2, 2, 8, 1)


def test_the_request_path_tells_access_reviews_and_dry_runs_from_writes():
    from stratctl.backends.kubernetes.api.cluster import ACCESS_REVIEW
    from tests.unit.fakes import FakeClock
    from tests.unit.http_fakes import Answer, cluster

    created = Answer(201, b'{"kind": "ConfigMap", "metadata": {"name": "x"}}')
    c = cluster(FakeClock(), created)
    c.create({"apiVersion": ACCESS_REVIEW[0], "kind": ACCESS_REVIEW[1], "metadata": {}, "spec": {}})
    c.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, dry_run=True)
    c.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    assert (c.metrics.writes, c.metrics.checks) == (1, 2)
