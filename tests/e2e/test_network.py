"""A network change while `stratctl submit` runs, against the real testbed: a TCP proxy
between stratctl and the API server (tests/netfault.py) makes every connection silent for
good, for 20 s, as a laptop moving from Wi-Fi to Ethernet meets it; new connections work
again after that. The API server, Volcano and KWOK go on meanwhile: trials end in the
blackout, and the loop must notice within seconds of the return.

What is measured, from the cluster's objects and the submit's own lines (each stamped
with when it was read): the first create after the return, when each watch came back,
the lowest target; and that every trial ran exactly once. `status` started in the
blackout answers once the network is back.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlparse

import pytest
import yaml

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from stratctl.backends.kubernetes.objects.state import volcano_phase
from tests.e2e.support import Cli, fake_study, of_study, unique, wait_until
from tests.netfault import SilentProxy

pytestmark = pytest.mark.e2e

TRIALS, PARALLEL, DURATION = 48, 16, "8s"
BLACKOUT = 20.0  # seconds every connection stays silent
BACK_WITHIN = 10.0  # seconds after the return by which the loop creates again


@pytest.fixture
def proxied(testbed, tmp_path):
    """The testbed's kubeconfig, its server behind a SilentProxy; (kubeconfig path, proxy)."""
    config = yaml.safe_load(open(testbed.kubeconfig))
    server = urlparse(config["clusters"][0]["cluster"]["server"])
    proxy = SilentProxy(server.hostname or "127.0.0.1", server.port or 443)
    for cluster in config["clusters"]:  # the certificate names 127.0.0.1, whatever the port
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig-through-proxy"
    path.write_text(yaml.safe_dump(config))
    yield str(path), proxy
    proxy.restore()
    proxy.close()


class Lines:
    """A process's stderr, each line stamped (time.monotonic) as it is read."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def matching(self, pattern: str) -> list[tuple[float, re.Match]]:
        return [(at, m) for at, line in self.lines if (m := re.search(pattern, line))]

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def created_at(job: dict) -> float:
    """A job's creation on time.monotonic (its timestamp has a resolution of one second)."""
    stamp = datetime.strptime(job["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return time.monotonic() - (time.time() - stamp.timestamp())


def test_after_a_network_change_submit_creates_again_within_seconds_and_every_trial_runs_once(
    testbed, api, studies, proxied
):
    kubeconfig, proxy = proxied
    name = unique("netchange")
    path = studies(name, fake_study(name, testbed.namespace, TRIALS, DURATION, parallelism=PARALLEL, min_parallelism=1))
    cli = Cli(testbed, context=testbed.restricted_context)
    cli.env["KUBECONFIG"] = kubeconfig
    submit = cli.start("submit", path, "--poll-interval", "1", "-o", "json")
    lines = Lines(submit)
    try:
        # the first wave running: then the network goes
        wait_until(lambda: len(of_study(api, VOLCANO_JOB, name)) >= PARALLEL, 90, message="the first wave created")
        proxy.blackout()
        went = time.monotonic()
        status = cli.start("status", name)  # started in the blackout, as a user would
        time.sleep(BLACKOUT)
        proxy.restore()
        back = time.monotonic()
        out, _ = status.communicate(timeout=60)
        status_done = time.monotonic()
        assert status.returncode == 0 and name in out
        stdout = submit.communicate(timeout=300)[0]
        assert submit.returncode == 0, lines.text()[-3000:]
    finally:
        if submit.poll() is None:
            submit.kill()
    lines.thread.join(timeout=10)
    jobs = of_study(api, VOLCANO_JOB, name)
    trials = [j["metadata"]["labels"][labels.TRIAL] for j in jobs]
    assert sorted(trials) == sorted(set(trials)) and len(trials) == TRIALS, "each trial exactly once"
    assert {volcano_phase(j) for j in jobs} == {"Completed"}
    progress = json.loads(stdout)
    assert (progress["succeeded"], progress["failed"], progress["created"]) == (TRIALS, 0, TRIALS)

    first_create = min(created_at(j) for j in jobs if created_at(j) >= back - 1)
    said = lines.matching(r"target in flight (\d+).*")
    targets = [int(m.group(1)) for _, m in said]
    recovered = [at - back for at, m in lines.matching(r"watch of (\w+) recovered") if at >= went]
    timeline = (
        f"first create {first_create - back:+.1f}s after the return (second resolution), "
        f"watches back at {', '.join(f'{r:+.1f}s' for r in recovered) or 'none broke'}, "
        f"status answered {status_done - back:+.1f}s after the return; the targets said, from the return: "
        + "; ".join(f"{at - back:+.1f}s {m.group(0)}" for at, m in said)
    )
    print(timeline)
    assert first_create - back <= BACK_WITHIN + 1, timeline
    assert min(targets) >= PARALLEL, timeline  # never cut by a stale picture
    assert all(r <= BACK_WITHIN for r in recovered), timeline
    assert status_done - back <= BACK_WITHIN, timeline
