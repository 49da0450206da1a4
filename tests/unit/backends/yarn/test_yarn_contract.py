"""The gang AM computes each container's rendezvous contract in Java (yarn-am/.../Rendezvous.java):
the same variables, by the same rules, as `rendezvous.environment`, the contract's one
definition. Rendezvous.java needs no Hadoop: it is compiled here on its own and run for the
same gangs as the Python rule (skipped without a JDK)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stratctl import rendezvous

SOURCE = (
    Path(__file__).resolve().parents[4]
    / "yarn-am"
    / "src"
    / "main"
    / "java"
    / "io"
    / "stratctl"
    / "yarn"
    / "Rendezvous.java"
)

GANGS = [
    [("worker", ["localhost", "localhost"])],
    [("worker", ["n1", "n2", "n3"])],
    [("ps", ["n1"]), ("worker", ["n2", "n2"])],
    [
        ("ps", ["n1", "n2"]),
        ("param-server", ["n3"]),
        ("worker", ["n4", "n5", "n6", "n7"]),
        ("evaluator", ["n1"]),
        ("logs9", ["n2"]),
    ],
]


@pytest.fixture(scope="module")
def java_contract(tmp_path_factory):
    assert shutil.which("javac") and shutil.which("java"), "the YARN gang AM needs a JDK (javac, java) to build"
    classes = tmp_path_factory.mktemp("rendezvous-classes")
    subprocess.run(["javac", "-nowarn", "-d", str(classes), str(SOURCE)], check=True, capture_output=True, timeout=120)

    def run(roles: list[tuple[str, list[str]]], rank: int | str, port: int) -> dict[int, dict[str, str]]:
        """Each rank's environment (`rank`: one, or "all") as the AM computes it."""
        args = [f"{role}={','.join(hosts)}" for role, hosts in roles]
        done = subprocess.run(
            ["java", "-cp", str(classes), "io.stratctl.yarn.Rendezvous", str(port), str(rank), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        out: dict[int, dict[str, str]] = {}
        for line in done.stdout.splitlines():
            if line.startswith("# rank "):
                env = out.setdefault(int(line.split()[-1]), {})
            else:
                key, _, value = line.partition("=")
                env[key] = value
        return out

    return run


@pytest.mark.parametrize("roles", GANGS, ids=lambda g: "+".join(f"{r}x{len(h)}" for r, h in g))
def test_the_ams_contract_is_the_python_rule_for_every_rank(java_contract, roles):
    port = rendezvous.derived_port(7)
    ranks = range(sum(len(hosts) for _, hosts in roles))
    assert java_contract(roles, "all", port) == {rank: rendezvous.environment(roles, rank, port) for rank in ranks}
    assert java_contract(roles, ranks[-1], port) == {ranks[-1]: rendezvous.environment(roles, ranks[-1], port)}


def test_a_rank_outside_the_gang_is_refused(java_contract):
    with pytest.raises(subprocess.CalledProcessError) as refused:
        java_contract([("worker", ["a", "b"])], 2, 20000)
    assert "rank 2 outside 0..1" in refused.value.stderr
