"""stratctl installed as users install it: the wheel in a fresh virtualenv, its `stratctl`
command run outside the source tree, submits a Slurm study and a YARN study to the real
testbeds, and every trial succeeds (an editable install hid that the wheel had neither
backend). The YARN gang AM's jar is found where `make yarn-am` writes it, or named in one
line."""

from __future__ import annotations

import json
import subprocess
import time

from stratctl.backends.yarn.scheduler import built_jar

RESULT = 'echo "{\\"loss\\": $((RANDOM % 100))}" > "$STRATCTL_OUTPUT_DIR/result.json"'

SLURM = """\
name: {name}
backend: slurm
slurm: {{partition: research, time_limit: 5m}}
checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: 2, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{limits: {{nvidia.com/gpu: 1}}}}
throttle: {{parallelism: {{min: 1, initial: 3, max: 3}}}}
"""

YARN = """\
name: {name}
backend: yarn
yarn: {{resource_managers: ["{rm}"], queue: research}}
checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: 2, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: 1}}}}
throttle: {{parallelism: {{min: 1, initial: 3, max: 3}}}}
"""


def name(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 1000000}"


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def runs_from_the_virtualenv(installed, cwd) -> None:
    """The command is the virtualenv's, its package the installed one (not the source tree)."""
    where = subprocess.run(
        [
            str(installed.bin / "python"),
            "-c",
            "import stratctl.backends.slurm, stratctl.backends.yarn, stratctl; print(stratctl.__file__)",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(installed.bin.parent / "lib")), where.stdout


def submitted_and_succeeded(installed, path, cwd, env, backend: str, trials: int) -> None:
    progress = json.loads(
        ok(installed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=cwd, env=env))
    )
    assert (progress["backend"], progress["succeeded"], progress["failed"]) == (backend, trials, 0), progress
    rows = json.loads(ok(installed.stratctl("status", str(path), "-o", "json", cwd=cwd, env=env)))["trials"]
    assert len(rows) == trials and all(r["state"] == "succeeded" and "loss" in (r["result"] or {}) for r in rows), rows


def test_the_installed_stratctl_runs_a_slurm_study(installed, slurm, tmp_path):
    runs_from_the_virtualenv(installed, tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text(SLURM.format(name=name("inst-slurm"), ckpt=tmp_path / "ckpt", command=json.dumps(RESULT)))
    started = time.monotonic()
    submitted_and_succeeded(installed, path, tmp_path, slurm.env, "slurm", trials=3)
    print(
        f"wheel built in {installed.build_seconds:.1f} s, installed in {installed.install_seconds:.1f} s; "
        f"Slurm study of 3 trials in {time.monotonic() - started:.1f} s"
    )


def test_the_installed_stratctl_runs_a_yarn_study_with_the_am_jar_make_yarn_am_built(installed, yarn, tmp_path):
    env = {k: v for k, v in yarn.env.items() if k != "STRATCTL_YARN_AM_JAR"}
    if yarn.local:  # the testbed's jar is where `make yarn-am` writes it: found there, named by nothing
        assert yarn.env["STRATCTL_YARN_AM_JAR"] == str(built_jar()), (yarn.env, built_jar())
    else:
        env["STRATCTL_YARN_AM_JAR"] = yarn.env.get("STRATCTL_YARN_AM_JAR", "")
    path = tmp_path / "study.yaml"
    path.write_text(YARN.format(name=name("inst-yarn"), rm=yarn.rm, ckpt=tmp_path / "ckpt", command=json.dumps(RESULT)))
    started = time.monotonic()
    submitted_and_succeeded(installed, path, tmp_path, env, "yarn", trials=3)
    print(f"YARN study of 3 trials in {time.monotonic() - started:.1f} s")


def test_the_installed_stratctl_says_in_one_line_how_to_get_a_missing_am_jar(installed, yarn, tmp_path):
    path = tmp_path / "study.yaml"
    study = name("inst-nojar")
    path.write_text(YARN.format(name=study, rm=yarn.rm, ckpt=tmp_path / "ckpt", command=json.dumps(RESULT)))
    missing = tmp_path / "nowhere" / "stratctl-yarn-am.jar"
    done = installed.stratctl("submit", str(path), cwd=tmp_path, env={**yarn.env, "STRATCTL_YARN_AM_JAR": str(missing)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {study}: no gang application master jar at {missing} (STRATCTL_YARN_AM_JAR)")
    assert "`make yarn-am`" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert yarn.apps(study) == []  # nothing submitted
