"""`queue:` as a list: the study's queues in order of preference, validated with located errors."""

from __future__ import annotations

from tests.unit.studies import MINIMAL, load, problems


def with_queue(line: str) -> str:
    return MINIMAL.replace("namespace: ns\n", f"namespace: ns\n{line}\n")


def test_a_queue_name_is_a_one_queue_list(tmp_path):
    study = load(tmp_path, with_queue("queue: research"))
    assert (study.queue, study.queues, study.home_queue) == ("research", ("research",), "research")


def test_a_list_names_the_queues_in_order(tmp_path):
    study = load(tmp_path, with_queue("queue: [research, research-overflow]"))
    assert study.queues == ("research", "research-overflow")
    assert study.home_queue == "research"


def test_the_default_is_the_default_queue(tmp_path):
    assert load(tmp_path, MINIMAL).queues == ("default",)


def test_bad_queue_lists_are_located_at_the_entry(tmp_path):
    assert problems(tmp_path, with_queue("queue: [research, Research_2]")) == [
        "study.yaml:3:19: queue.1: queue 'Research_2' is not a DNS-1123 label (lowercase letters, digits and '-', "
        "starting and ending with a letter or digit)"
    ]
    assert problems(tmp_path, with_queue("queue: [a, b, a]")) == ["study.yaml:3:15: queue.2: queue 'a' is listed twice"]
    assert problems(tmp_path, with_queue("queue: [a, 3]")) == [
        "study.yaml:3:12: queue.1: queue 1: expected a queue name, got 3"
    ]
    assert problems(tmp_path, with_queue("queue: []")) == [
        "study.yaml:3:8: queue: queue must be a queue name or a non-empty list of queue names"
    ]
