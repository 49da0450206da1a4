"""A closed-loop search mirrored into an Optuna storage (`submit --storage URL`), so
optuna-dashboard (or any Optuna code) can show and analyse it.

The cluster stays the source of truth: the search is rebuilt from the study's jobs and
record on every start, whatever the storage holds. The mirror only copies what the record
says ended (`told`: complete with its values, failed, pruned with its intermediate values),
each trial once, named by the user attribute `stratctl_trial`; a rerun, or a loop on
another machine, adds what is missing and nothing twice. A storage that stops answering is
said once and tried again next cycle; it never stops the search.

URLs: `journal:PATH` (or a PATH ending in `.log` or `.journal`) is Optuna's journal file,
which needs no server; anything else with `://` is a SQLAlchemy database URL for Optuna's
RDB storage (`sqlite:///search.db`, `postgresql://user@host/db`; the database's driver must
be installed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stratctl.core.search import distributions, in_space
from stratctl.core.spec import Study
from stratctl.errors import UsageError
from stratctl.run.closedloop import steps_of_entry

TRIAL_ATTR = "stratctl_trial"
INDEX_ATTR = "stratctl_index"


def open_storage(url: str) -> Any:
    """The Optuna storage a URL names (UsageError when it cannot be opened)."""
    import optuna

    try:
        if url.startswith("journal:") or url.endswith((".log", ".journal")):
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
        if "://" in url:
            return optuna.storages.RDBStorage(url)
    except Exception as exc:  # the driver's or the file's own error, said whole
        raise UsageError(f"--storage {url}: cannot open it: {exc}") from None
    raise UsageError(
        f"--storage {url}: not a storage URL (journal:PATH, PATH.log, or a database URL such as "
        "sqlite:///search.db or postgresql://user@host/db)"
    )


class StorageMirror:
    def __init__(self, storage: Any, study: Study):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.study = study
        self.distributions = distributions(study)
        self.optuna_study = optuna.create_study(
            storage=storage,
            study_name=study.name,
            load_if_exists=True,
            directions=[o.direction for o in study.objectives],
        )
        self.mirrored = {t.user_attrs.get(TRIAL_ATTR) for t in self.optuna_study.get_trials(deepcopy=False)}
        self.failing = False

    @classmethod
    def open(cls, url: str, study: Study) -> StorageMirror:
        if not study.strategy.closed_loop:
            raise UsageError(
                "--storage mirrors a closed-loop search (strategy tpe, gp, cmaes or nsga2); "
                f"study {study.name} is {study.strategy.kind}"
            )
        storage = open_storage(url)
        try:
            return cls(storage, study)
        except Exception as exc:  # e.g. a study of that name with other directions
            raise UsageError(f"--storage {url}: {exc}") from None

    def sync(self, told: Mapping[str, Mapping[str, Any]]) -> int:
        """Add the ended trials not mirrored yet, in the order they were asked; how many.
        Raises what the storage raises (the loop says it and tries again next cycle)."""
        new = sorted(
            (name for name in told if name not in self.mirrored),
            key=lambda n: index if isinstance(index := told[n].get("index"), int) else 1 << 62,
        )
        for name in new:
            self.optuna_study.add_trial(self._frozen(name, told[name]))
            self.mirrored.add(name)
        return len(new)

    def mirror(self, told: Mapping[str, Mapping[str, Any]], say: Callable[[str], None]) -> None:
        """`sync`, as a submit loop runs it each cycle: a storage that does not answer is said
        once per failing stretch and tried again next cycle (the cluster stays the truth)."""
        try:
            self.sync(told)
        except Exception as exc:  # the storage's own error, said whole
            if not self.failing:
                say(f"--storage: mirroring failed ({type(exc).__name__}: {exc}); trying again each cycle")
            self.failing = True
        else:
            if self.failing:
                say("--storage: mirroring again")
            self.failing = False

    def _frozen(self, name: str, entry: Mapping[str, Any]) -> Any:
        TrialState = self._optuna.trial.TrialState
        given = entry.get("params")
        params = given if isinstance(given, dict) else {}
        known = {k: v for k, v in params.items() if k in self.distributions}
        fits = in_space(self.study, known)  # else a trial of an earlier version of the space: failed, no params
        attrs = {TRIAL_ATTR: name, **({INDEX_ATTR: entry["index"]} if isinstance(entry.get("index"), int) else {})}
        steps = steps_of_entry(entry)
        values = entry.get("values")
        if entry.get("state") == "complete" and isinstance(values, list) and fits:
            return self._optuna.trial.create_trial(
                params=known,
                distributions=self.distributions,
                values=[float(v) for v in values],
                intermediate_values=steps,
                user_attrs=attrs,
            )
        state = TrialState.PRUNED if entry.get("state") == "pruned" else TrialState.FAIL
        return self._optuna.trial.create_trial(
            params=known if fits else {},
            distributions=self.distributions if fits else {},
            intermediate_values=steps,
            state=state,
            user_attrs=attrs,
        )
