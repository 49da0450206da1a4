"""examples/rendezvous/rendezvous_check.py as the tasks of a trial run it: real processes on
this host, each given the contract of its rank (stratctl.rendezvous.environment)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from stratctl import rendezvous

PROGRAM = Path(__file__).resolve().parents[3] / "examples" / "rendezvous" / "rendezvous_check.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(env: dict[str, str], *args: str) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if not k.startswith("STRATCTL_")}
    return subprocess.Popen(
        [sys.executable, str(PROGRAM), *args],
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def trial(tmp_path, roles, port, ranks=None, name="t-1", extra=None, args=("--timeout", "5")):
    """Start the ranks `ranks` (default: all) of one trial; (process, env) of each."""
    n = sum(len(hosts) for _, hosts in roles)
    procs = []
    for rank in ranks if ranks is not None else range(n):
        env = {
            **rendezvous.environment(roles, rank, port),
            "STRATCTL_TRIAL": name,
            "STRATCTL_OUTPUT_DIR": str(tmp_path),
            **(extra or {}).get(rank, {}),
        }
        procs.append(start(env, *args))
    return [(p, *p.communicate(timeout=30)) for p in procs]


def test_every_rank_meets_rank_0_and_the_result_says_so(tmp_path):
    roles = [("ps", ["127.0.0.1"]), ("worker", ["127.0.0.1", "127.0.0.1"])]
    port = free_port()
    done = trial(tmp_path, roles, port, args=("--history", str(tmp_path / "history.jsonl")))
    assert [p.returncode for p, _, _ in done] == [0, 0, 0], [err for _, _, err in done]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == {
        "rendezvous": "ok",
        "world_size": 3,
        "peers_heard": 2,
        "master": f"127.0.0.1:{port}",
        "resumed": False,
    }
    assert json.loads(done[0][1]) == result  # and on stdout
    [record] = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert record["heard"] == [1, 2] and record["roles"] == {"ps": 1, "worker": 2}
    assert record["listening"][0] <= record["listening"][1]


def test_a_rank_that_never_comes_fails_the_rendezvous(tmp_path):
    done = trial(tmp_path, [("worker", ["127.0.0.1"] * 3)], free_port(), ranks=[0, 1], args=("--timeout", "2"))
    assert [p.returncode for p, _, _ in done] == [1, 1]
    assert "never heard rank(s) [2]" in done[0][2]
    assert "rank 0 says the rendezvous failed" in done[1][2]
    assert not (tmp_path / "result.json").exists()


def test_a_rank_of_another_trial_or_a_bent_contract_is_caught(tmp_path):
    roles = [("worker", ["127.0.0.1"] * 2)]
    port = free_port()
    done = trial(tmp_path, roles, port, extra={1: {"STRATCTL_TRIAL": "t-2"}})
    assert done[0][0].returncode == 1 and "a process of another trial (t-2) connected" in done[0][2]
    bent = trial(tmp_path, roles, free_port(), extra={1: {"MASTER_ADDR": "127.0.0.2"}}, args=("--timeout", "1"))
    assert bent[1][0].returncode == 1 and "MASTER_ADDR 127.0.0.2 is not rank 0's address" in bent[1][2]
    missing = start({"STRATCTL_NUM_NODES": "2"})
    _, err = missing.communicate(timeout=30)
    assert missing.returncode == 1 and "not started with stratctl's rendezvous contract" in err
