"""Session fixtures of the install tests: stratctl as users install it (the wheel built once
from the source tree, then `pip install` of it into a fresh virtualenv, not the editable
.venv of `make venv`), and the Slurm and YARN testbeds of tests/backends/testbeds.py."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.backends.testbeds import slurm, yarn  # noqa: F401  (the testbeds' session fixtures, as used here)
from tests.install.wheel import build_wheel, fresh_venv


@dataclass
class Installed:
    bin: Path  # the virtualenv's bin directory
    wheel: Path
    build_seconds: float
    install_seconds: float

    def stratctl(self, *args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
        """The virtualenv's `stratctl` command, in `cwd` (outside the source tree), with the
        environment of a user's shell plus `env` (no PYTHONPATH)."""
        shell = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STRATCTL_TRACEBACK")}
        return subprocess.run(
            [str(self.bin / "stratctl"), *args],
            cwd=cwd,
            env={**shell, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(autouse=True, scope="session")
def catalog(tmp_path_factory):
    """The names the tests' studies are known by (backends/batch/catalog.py) kept out of the user's home."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATCTL_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    work = tmp_path_factory.mktemp("install")
    started = time.monotonic()
    wheel = build_wheel(work)
    built = time.monotonic()
    bin_dir = fresh_venv(work / "venv", wheel)
    return Installed(bin_dir, wheel, built - started, time.monotonic() - built)
