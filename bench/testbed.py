"""Where the benchmarks find a cluster: `STRATCTL_TEST_KUBECONFIG`, else the local testbed.

Brings the testbed up (building it if needed) and returns the kubeconfig path, its admin
and restricted contexts, the trial namespace and the kubectl to compare against.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    kubeconfig: str
    admin_context: str | None
    restricted_context: str | None
    namespace: str
    kubectl: str | None


def testbed_target() -> Target:
    given = os.environ.get("STRATCTL_TEST_KUBECONFIG")
    if given:
        return Target(
            given,
            os.environ.get("STRATCTL_TEST_CONTEXT"),
            os.environ.get("STRATCTL_TEST_CONTEXT"),
            os.environ.get("STRATCTL_TEST_NAMESPACE", "stratctl-e2e"),
            shutil.which("kubectl"),
        )
    out = subprocess.run(["bash", str(REPO / "testbed" / "up.sh")], check=True, stdout=subprocess.PIPE, text=True)
    kubeconfig = out.stdout.strip().splitlines()[-1]
    run_dir = Path(kubeconfig).parent
    bin_dir = (run_dir / "bin-dir").read_text().strip()
    return Target(kubeconfig, "admin", "restricted", "stratctl-e2e", str(Path(bin_dir) / "kubectl"))


@contextlib.contextmanager
def scheduler_paused(target: Target):
    """Pause the local testbed's Volcano scheduler (SIGSTOP) while reads are timed.

    With thousands of gangs that can never be placed, the scheduler spends most of this
    2-core machine's CPU on them every cycle, and a read benchmark then measures the
    scheduler's appetite more than the reads. On a real cluster the scheduler runs on
    other machines than the user's `status`; both sides of a comparison run with it
    paused. Yields whether it was paused (never on a cluster given by kubeconfig).
    """
    pid_file = Path(target.kubeconfig).parent / "pids" / "vc-scheduler.pid"
    pid = int(pid_file.read_text()) if not os.environ.get("STRATCTL_TEST_KUBECONFIG") and pid_file.exists() else None
    if pid:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pid is not None
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
