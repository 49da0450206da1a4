"""What the everyday commands import: each module kept off their path is start-up time
saved on every run (bench/startup_bench.py measures it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]


def _modules_after(code: str, *args: str, env: dict | None = None) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "; print(' '.join(sys.modules))", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    return set(done.stdout.split())


def test_validating_a_quasi_random_study_imports_neither_scipy_nor_numpy():
    code = (
        "import sys; from stratctl.backends import rendezvous_for; from stratctl.core.render import validate; "
        "validate(sys.argv[1], rendezvous_for)"
    )
    loaded = _modules_after(code, str(ROOT / "examples/ppo-tuning.yaml"))
    assert "stratctl.core.sobol" in loaded
    assert not {"scipy", "numpy"} & loaded


def test_the_cli_imports_rich_only_for_commands_that_print_with_it():
    code = (
        "import sys; from stratctl.cli.main import main\ntry: main(['validate', sys.argv[1]])\nexcept SystemExit: pass"
    )
    loaded = _modules_after(code, str(ROOT / "examples/demo.yaml"))
    assert "stratctl.core.render" in loaded
    assert not any(m == "rich" or m.startswith("rich.") for m in loaded)


def test_completion_skips_pydantics_plugin_scan():
    code = "import sys; from stratctl.cli.main import main\ntry: main([])\nexcept SystemExit: pass"
    env = {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl sta", "COMP_CWORD": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport pydantic.plugin._loader as l; print(l._plugins)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    assert done.stdout.split("\n")[0] == "status"
    assert "None" in done.stdout.split("\n")[1]  # never scanned


def test_a_submit_logging_to_ci_loads_neither_rich_nor_tenacity_nor_the_optional_loops():
    # stderr is a pipe here: log lines, no panel; no request fails, so no retry machinery;
    # a grid study with no --prometheus-url and nothing to watch: no closed loop, no signals
    code = (
        "import sys; from stratctl.cli.main import main\n"
        "try: main(['submit', sys.argv[1], '--dry-run', 'client', '-o', 'json'])\nexcept SystemExit: pass"
    )
    loaded = _modules_after(code, str(ROOT / "examples/demo.yaml"), env={"FORCE_COLOR": "", "TTY_COMPATIBLE": ""})
    assert "stratctl.backends.kubernetes.loop.controller" in loaded and "stratctl.core.render" in loaded
    assert not any(m == "rich" or m.startswith("rich.") for m in loaded)
    assert "tenacity" not in loaded
    assert (
        not {
            "stratctl.backends.kubernetes.watch.capacity",
            "stratctl.backends.kubernetes.watch.prometheus",
            "stratctl.backends.kubernetes.verbs.status",
        }
        & loaded
    )


def test_the_kubernetes_commands_load_no_study_model():
    """`status`, `delete`, `logs` and `wait` on Kubernetes read the cluster, not a study file:
    going through the backends package must not import the study model (its distributions
    alone are about 0.2 s of every command's start-up)."""
    code = (
        "import sys; from stratctl.cli.main import app; import stratctl.backends.kubernetes.verbs.status, "
        "stratctl.run.finish, stratctl.backends.kubernetes.verbs.delete, stratctl.backends.kubernetes.verbs.logs, "
        "stratctl.backends.kubernetes.api.connect"
    )
    loaded = _modules_after(code)
    assert "stratctl.backends.kubernetes.verbs.status" in loaded
    assert not {"stratctl.core.spec", "stratctl.core.distributions", "stratctl.core.space"} & loaded
