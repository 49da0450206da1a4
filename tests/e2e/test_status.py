"""`stratctl status` as a process on a small finished study of the real testbed: a column
per parameter and metric, CSV that parses, the failed trial's exit code, the studies-only
listing, an unknown --sort metric, --best, and the best trial at the end of `submit`."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

from tests.e2e.support import fake_study as study_yaml
from tests.e2e.support import unique

pytestmark = pytest.mark.e2e


def test_status_of_a_finished_study_as_a_person_and_a_script_read_it(testbed, api, cli, studies):
    name = unique("st")
    loss = "{{ (params.seed - 2) * (params.seed - 2) + params.seed / 10 }}"
    message = '{"loss": ' + loss + ', "accuracy": {{ 1 - params.seed / 10 }}}'
    path = studies(
        name,
        study_yaml(
            name,
            testbed.namespace,
            4,
            "2s",
            annotations={
                "testbed.stratctl.io/termination-message": message,
                "testbed.stratctl.io/exit-code": "{{ 3 if params.seed == 3 else 0 }}",
            },
            extra="retries: {max_failures: 0}\n",
        ),
    )
    out = cli.run("submit", path, "--poll-interval", "1", timeout=120, code=1)  # one trial fails: exit 1
    last = out.splitlines()[-1]
    assert last.startswith("best trial by loss (lowest): ") and "(seed=2): loss 0.2, accuracy 0.8" in last, out

    rows = list(csv.DictReader(io.StringIO(cli.run("status", name, "-o", "csv"))))
    assert len(rows) == 4
    assert list(rows[0])[:7] == ["index", "trial", "state", "attempt", "seed", "loss", "accuracy"]
    by_seed = {int(r["seed"]): r for r in rows}
    assert {s: r["state"] for s, r in by_seed.items()} == {0: "succeeded", 1: "succeeded", 2: "succeeded", 3: "failed"}
    assert float(by_seed[2]["loss"]) == 0.2 and float(by_seed[0]["accuracy"]) == 1.0
    assert by_seed[3]["exit_code"] == "3" and by_seed[3]["why"].startswith("exit 3: Error")
    assert all(r["start"] and r["finish"] for r in rows)  # RFC 3339 times of each trial
    assert sorted(r["index"] for r in rows) == ["0", "1", "2", "3"]

    table = cli.run("status", name)  # into a pipe: plain columns
    studies_part, trials_part = table.split("\n\n")
    assert "finished: 3 succeeded, 1 failed in " in studies_part
    header = trials_part.splitlines()[0].split()
    assert header[:6] == ["trial", "state", "attempt", "seed", "loss", "accuracy"]
    assert sorted(line.split()[0] for line in trials_part.splitlines()[1:]) == sorted(r["trial"] for r in rows)

    listing = cli.run("status")  # the namespace's studies, no trials
    assert any(line.split()[0] == name for line in listing.splitlines()[1:])
    assert not any(r["trial"] in listing for r in rows)
    everywhere = cli.run("status", "-A").splitlines()
    assert everywhere[0].split()[:2] == ["namespace", "study"]
    assert [testbed.namespace, name] in [line.split()[:2] for line in everywhere[1:]]

    doc = json.loads(cli.run("status", name, "-o", "json"))
    assert doc["studies"][0]["note"].startswith("finished: 3 succeeded, 1 failed in ")
    first = min(doc["trials"], key=lambda t: t["index"])
    assert first["start"].endswith("Z") and first["finish"] > first["start"] and first["duration_seconds"] > 0

    plain_env = {k: v for k, v in cli.env.items() if k != "STRATCTL_TRACEBACK"}  # as a user meets the error
    done = subprocess.run(
        cli.args("status", name, "--sort", "acuracy"), env=plain_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "metrics reported: loss, accuracy" in done.stderr, done.stderr
    best = cli.run("status", name, "--best", "2", "--sort", "-accuracy", "-o", "name").split()
    assert best == [by_seed[0]["trial"], by_seed[1]["trial"]]
