"""A study on Slurm or YARN, as users install stratctl (the wheel in a fresh virtualenv),
from three working directories: submitted and finished from one, submitted again from a
second (nothing created: its study directory is beside the study file, not in the working
directory), and every verb by its name from a third, with no kubeconfig at all (a
Kubernetes error would say so)."""

from __future__ import annotations

import json

import pytest

from tests.install.test_installed import RESULT, SLURM, YARN, name, ok

SAY = 'echo "hello from $STRATCTL_TRIAL"; '


@pytest.mark.parametrize("backend", ["slurm", "yarn"])
def test_a_study_is_one_study_from_every_directory_and_every_verb_works_by_name(installed, backend, tmp_path, request):
    bed = request.getfixturevalue(backend)
    study = name(f"byname-{backend}")
    for d in ("proj", "a", "b", "c"):
        (tmp_path / d).mkdir()
    path = tmp_path / "proj" / "study.yaml"
    template = SLURM if backend == "slurm" else YARN
    fields = {"name": study, "ckpt": tmp_path / "ckpt", "command": json.dumps(SAY + RESULT)}
    path.write_text(template.format(**fields, **({"rm": bed.rm} if backend == "yarn" else {})))
    env = {**bed.env, "STRATCTL_STATE_DIR": str(tmp_path / "state"), "KUBECONFIG": str(tmp_path / "no-kubeconfig")}

    def stratctl(where: str, *args: str, timeout: float = 300):
        return installed.stratctl(*args, cwd=tmp_path / where, env=env, timeout=timeout)

    # finished from one directory
    first = json.loads(ok(stratctl("a", "submit", "../proj/study.yaml", "--poll-interval", "0.5", "-o", "json")))
    assert (first["created"], first["succeeded"], first["failed"]) == (3, 3, 0), first
    directory = tmp_path / "proj" / "stratctl-out" / study
    trials = sorted(p.name for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert trials == sorted(_trials(stratctl, study))
    assert not (tmp_path / "a" / "stratctl-out").exists()  # nothing in the working directory

    # submitted again from another: nothing created
    again = json.loads(ok(stratctl("b", "submit", str(path), "--poll-interval", "0.5", "-o", "json")))
    assert (again["created"], again["succeeded"]) == (0, 3), again
    assert not (tmp_path / "b" / "stratctl-out").exists()
    if backend == "slurm":
        assert len(bed.jobs(study)) == 3 and all(
            str(j["standard_output"]).startswith(f"{directory}/") for j in bed.jobs(study)
        )
    else:
        assert len(bed.apps(study)) == 3

    # every verb by name from a third directory, no Kubernetes anywhere
    rows = json.loads(ok(stratctl("c", "status", study, "-o", "json")))["trials"]
    assert len(rows) == 3 and all(r["state"] == "succeeded" for r in rows), rows
    waited = stratctl("c", "wait", study, "--timeout", "30s")
    assert waited.returncode == 0 and waited.stdout == f"{study}: finished, 3 succeeded\n", waited
    trial = rows[0]["trial"]
    logged = stratctl("c", "logs", study, trial)
    assert logged.returncode == 0 and f"hello from {trial}" in logged.stdout, logged
    for verb in ("drain", "resume"):
        done = stratctl("c", verb, study)
        assert done.returncode == 0 and done.stdout.startswith(f"{study}: "), (verb, done)
    explicit = stratctl("c", "status", study, "--backend", backend, "-o", "name")
    assert explicit.returncode == 0 and len(explicit.stdout.split()) == 3, explicit
    other = "yarn" if backend == "slurm" else "slurm"
    refused = stratctl("c", "status", study, "--backend", other)
    assert refused.returncode != 0 and "kube" not in refused.stderr.lower(), refused
    deleted = stratctl("c", "delete", study, "--yes")
    assert deleted.returncode == 0 and f"removed its study directory {directory}" in deleted.stdout, deleted
    assert not directory.exists()
    for done in (waited, logged, deleted):
        assert "kube" not in done.stderr.lower(), done.stderr


def _trials(stratctl, study: str) -> list[str]:
    out = ok(stratctl("c", "status", study, "-o", "name"))
    return [line.rsplit("/", 1)[-1] for line in out.split()]
