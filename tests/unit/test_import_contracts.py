"""The import contracts `make lint` checks (.importlinter) fail on what they forbid: a new
import cycle anywhere in stratctl (between two modules, or between two rooms of one package)
breaks the `cycles` contract, a room of the Kubernetes backend that imports one above it
breaks the `rooms` contract, and the study core or the shared loop importing a backend (the
Renderer taking Kubernetes rendering itself instead of being handed it) breaks `core` or
`run`. Each case is a copy of the package with one import added, checked
by `lint-imports` with the project's own configuration; the copy as it is passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (module that gets the import, the import added, the contract it breaks, what the report names)
CASES = {
    "a cycle between two modules": (
        "stratctl/core/digest.py",  # space.py imports digest.py
        "from stratctl.core import space as _space  # noqa: F401\n",
        "cycles",
        "No cycles are allowed in stratctl.core",
    ),
    "a cycle between two packages": (
        "stratctl/backends/kubernetes/objects/gpus.py",  # the loop reads the objects
        "from stratctl.backends.kubernetes.loop import controller as _controller  # noqa: F401\n",
        "cycles",
        "No cycles are allowed in stratctl.backends.kubernetes",
    ),
    "a lower room importing a higher one": (
        "stratctl/backends/kubernetes/api/resources.py",
        "from stratctl.backends.kubernetes.objects import state as _state  # noqa: F401\n",
        "rooms",
        "stratctl.backends.kubernetes.api.resources -> stratctl.backends.kubernetes.objects.state",
    ),
    "the study core importing a backend": (
        "stratctl/core/render.py",  # handed the rendezvous step (core/contract.py) instead
        "from stratctl.backends.kubernetes.rendering import rendezvous as _rendezvous  # noqa: F401\n",
        "core",
        "stratctl.core.render -> stratctl.backends.kubernetes.rendering.rendezvous",
    ),
    "the shared loop importing a backend": (
        "stratctl/run/cycle.py",
        "from stratctl.backends import rendezvous_for as _rendezvous_for  # noqa: F401\n",
        "run",
        "stratctl.run.cycle -> stratctl.backends",
    ),
}


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "stratctl", tmp_path / "stratctl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def _lint(where: Path, contract: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--contract", contract],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("contract", ["cycles", "rooms", "core", "run"])
def test_the_package_as_it_is_keeps_the_contract(tmp_path, contract):
    checked = _lint(_copy(tmp_path), contract)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 kept, 0 broken" in checked.stdout


@pytest.mark.parametrize("case", CASES)
def test_one_import_more_breaks_the_contract(tmp_path, case):
    module, line, contract, said = CASES[case]
    where = _copy(tmp_path)
    path = where / module
    text = path.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    assert sep, f"{module}: no `from __future__` line to add the import after"
    path.write_text(head + sep + line + rest)
    checked = _lint(where, contract)
    assert checked.returncode != 0
    assert "0 kept, 1 broken" in checked.stdout
    assert said in " ".join(checked.stdout.split()), checked.stdout
