"""A virtualenv with JAX's CPU build (about 100 MB of jaxlib; no GPU), for the tests that run
a real framework's multi-process rendezvous (examples/rendezvous/jax_check.py) as a trial.
Made once per JAX version and Python under ~/.cache/stratctl/ (STRATCTL_JAX_CACHE elsewhere),
never in the repository, and reused after. PyTorch is not used: from the package index it
brings the CUDA libraries, gigabytes."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

JAX_VERSION = "0.10.2"


def jax_python() -> Path:
    """The python of a virtualenv holding `jax[cpu]==JAX_VERSION`, made if missing;
    AssertionError saying why when it cannot be installed (a test needing it fails, it is
    not skipped)."""
    cache = Path(os.environ.get("STRATCTL_JAX_CACHE") or Path.home() / ".cache" / "stratctl")
    root = cache / f"jax-{JAX_VERSION}-py{sys.version_info.major}.{sys.version_info.minor}"
    python, ready = root / "bin" / "python", root / ".ready"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run making the same one: wait for it
        if ready.exists():
            return python
        shutil.rmtree(root, ignore_errors=True)  # what an interrupted make left
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"jax[cpu]=={JAX_VERSION}"],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert done.returncode == 0, (
            f"cannot install jax[cpu]=={JAX_VERSION} into {root} (this test needs it: "
            f"the package index reachable, about 650 MB of disk):\n{done.stderr[-3000:]}"
        )
        works = subprocess.run(
            [str(python), "-c", "import jax; print(jax.devices())"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert works.returncode == 0, (
            f"jax[cpu]=={JAX_VERSION} installed in {root} but does not start:\n{works.stderr[-3000:]}"
        )
        ready.write_text(works.stdout)
        return python
