"""The Slurm and YARN testbeds' session fixtures (`slurm`, `yarn`, from testbeds.py) for
every test here, and `backend`: one test run against each testbed, with what that
backend's scheduler calls things (backends.py)."""

from __future__ import annotations

import pytest

from tests.backends.backends import BACKENDS
from tests.backends.testbeds import slurm, yarn  # noqa: F401  (session fixtures, found by name)


@pytest.fixture(autouse=True, scope="session")
def catalog(tmp_path_factory):
    """The names the tests' studies are known by (backends/batch/catalog.py) kept out of the user's home."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATCTL_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    """The test's backend over its testbed (its fixture brings the testbed up)."""
    return BACKENDS[request.param](request.getfixturevalue(request.param))
