"""The parse of API answers pauses the cyclic collector only while large answers are
parsed, and gives it back as it found it, however many threads parse at once."""

import gc
import json
import threading

import pytest

from stratctl.backends.kubernetes.api import answers


def big_list(n: int = 3000) -> bytes:
    return json.dumps({"items": [{"metadata": {"name": f"job-{i}", "labels": {"a": "b"}}} for i in range(n)]}).encode()


def test_a_large_answer_parses_with_the_collector_paused_and_given_back(monkeypatch):
    seen = []
    real = answers.orjson.loads
    monkeypatch.setattr(answers.orjson, "loads", lambda data: (seen.append(gc.isenabled()), real(data))[1])
    assert gc.isenabled()
    body = big_list()
    assert len(body) > answers.LARGE
    assert len(answers.parse(body)["items"]) == 3000
    assert seen == [False] and gc.isenabled()
    assert answers.parse(b'{"kind": "Status"}') == {"kind": "Status"}
    assert seen == [False, True]  # a small answer leaves the collector alone


def test_the_collector_stays_off_if_it_was_off():
    gc.disable()
    try:
        answers.parse(big_list())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_only_when_the_last_parse_ends(monkeypatch):
    inside, release = threading.Event(), threading.Event()
    real = answers.orjson.loads
    states = []

    def slow(data):
        if not inside.is_set():
            inside.set()
            release.wait(5)
        return real(data)

    monkeypatch.setattr(answers.orjson, "loads", slow)
    body = big_list()
    first = threading.Thread(target=answers.parse, args=(body,))
    first.start()
    assert inside.wait(5)
    answers.parse(body)  # a second parse, begun and ended while the first is still parsing
    states.append(gc.isenabled())
    release.set()
    first.join(5)
    states.append(gc.isenabled())
    assert states == [False, True]


def test_not_json_is_a_value_error():
    with pytest.raises(ValueError):
        answers.parse(b"<html>" + b"x" * answers.LARGE)
    assert gc.isenabled()
