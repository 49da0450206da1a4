"""The Slurm backend behind the attempt seam (backends/batch/scheduler.py): what the shared attempt
loop, `status`, `drain` and `resume` ask of a batch scheduler, in Slurm's own commands
(backends/slurm/commands.py) and the files each attempt leaves in its output directory.

- An attempt is one sbatch job (backends/slurm/script.py), named and commented so it is found
  again: before a submit whose answer was lost is sent again, and by every later run.
- Its state is squeue's while the controller remembers it, then its marks' (backends/slurm/state.py).
- Capacity is `sinfo --json`: the free GPUs of each usable node of the partition.
- Drain holds (`scontrol hold`, `requeuehold` for a running job) and `resume` releases:
  Slurm keeps what was held, its place in the queue and its priority age with it. The
  study's drained flag is a file in its output directory.
- A trial's result is the `result.json` its script leaves beside its log; its intermediate
  values (a closed-loop search's pruner) the lines its ranks append to `report.jsonl` there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stratctl.attempt import Attempt, Counted, StudyFiles
from stratctl.backends.batch.scheduler import study_directory
from stratctl.backends.slurm.blocks import BLOCKS, read_blocks
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.driver import holder_gone, running, stop
from stratctl.backends.slurm.script import TASKS, Script, block_script, build, comment_prefix, partitions, task_line
from stratctl.backends.slurm.state import latest, read_marks
from stratctl.core.render import Renderer, bundled_templates
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.core.task import task_of
from stratctl.errors import Invalid
from stratctl.trial.metrics import REPORT_FILE

REPORT_BYTES = 1 << 20  # of a trial's report.jsonl read each cycle: its latest lines


def output_of(study: Study, workdir: Path | str | None = None) -> Path:
    """Where a study's attempts write their logs, marks and results: its study directory
    (backends/batch/scheduler.py), absolute, the same from every working directory (`workdir`: the
    directory a relative `output_dir` is resolved against instead of the study file's)."""
    return study_directory(study, workdir)


def held_count(path: Path) -> int:
    """How many times drain requeued an attempt (its `.held` file), 0 when never."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_gpus(nodes: list[dict[str, Any]], partitions: tuple[str, ...] = ()) -> list[int]:
    """Free GPUs of each usable node (in any of the partitions, when some are set) from `sinfo --json`."""
    out = []
    for node in nodes:
        if partitions and not set(partitions) & set(node.get("partitions") or []):
            continue
        state = str(node.get("state") or "").lower()
        if any(word in state for word in ("down", "drain", "fail", "inval", "maint")):
            continue
        out.append(max(0, _gpus(node.get("gres")) - _gpus(node.get("gres_used"))))
    return out


def _gpus(gres: str | None) -> int:
    """GPUs in a GRES string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:0`, several comma-separated."""
    total = 0
    for part in (gres or "").split(","):
        fields = part.split("(")[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def reported_steps(path: Path, attempt: int, metric: str) -> dict[int, float]:
    """Step -> value of `metric` in a report.jsonl (its last REPORT_BYTES), of one attempt:
    the first line of each step wins (rank 0 and the others report the same steps); a
    line that is not a report (torn, or of another attempt) is skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - REPORT_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return {}
    steps: dict[int, float] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("attempt") not in (attempt, None):
            continue
        step, values = entry.get("step"), entry.get("values")
        value = values.get(metric) if isinstance(values, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and isinstance(value, int | float):
            steps.setdefault(step, float(value))
    return steps


class SlurmScheduler(StudyFiles, Counted):
    kind, title, controller = "slurm", "Slurm", "Slurm controller"
    create_command = "sbatch"  # the command that creates an attempt, as the submit summary counts it
    limit_words = "submit limits"  # what a refusal to create is, in Slurm's words
    calls_word = "commands"

    def __init__(
        self,
        study: Study,
        renderer: Renderer | None = None,
        slurm: Slurm | None = None,
        workdir: str | None = None,
        rendered: dict[str, list[dict[str, Any]]] | None = None,
    ):
        self.study, self.slurm, self.workdir = study, slurm or Slurm(), workdir
        # first attempts `renderer` rendered already (submit's check of every trial): a block
        # takes them (and lets them go) instead of rendering them again
        self.rendered = dict(rendered or {})
        self.client = self.slurm
        self.renderer = renderer or Renderer(study, rendezvous=None)  # the script completes the contract
        self.output = output_of(study, workdir)
        self._max_array: int | None = None  # the controller's MaxArraySize, once read
        self._known = False  # the controller was seen to know a job of the study

    @property
    def where(self) -> str:
        return f"slurm:{','.join(partitions(self.study)) or 'default'}"

    @property
    def queue(self) -> str:
        return ",".join(partitions(self.study))

    # -- observe ---------------------------------------------------------------------------

    def attempts(self, marks: bool = True) -> dict[str, Attempt]:
        """Each trial's latest attempt (`marks`: also those the controller has forgotten), with
        its trial's preemptions (drain's requeues left out: `stop`)."""
        return latest(self._jobs(), self.study.name, read_marks(self.output) if marks else {}, read_blocks(self.output))

    def _jobs(self) -> list[dict[str, Any]]:
        """The controller's jobs, whole (`squeue --json`) once it has been seen to know one
        of the study's; until then, asked first whether it knows any (`Slurm.knows`): a
        study none of whose jobs the controller knows (a first submit, or one whose jobs it
        has forgotten) has nothing the whole listing would add to its marks, and that
        listing is most of a submit's time where the controller remembers thousands of jobs."""
        if not self._known:
            if not self.slurm.knows(comment_prefix(self.study.name)):
                return []
            self._known = True
        return self.slurm.jobs()

    def free_gpus(self) -> list[int]:
        return free_gpus(self.slurm.nodes(), partitions(self.study))

    # -- create ----------------------------------------------------------------------------

    def prepare(self, trial: Trial, number: int) -> Script:
        """Attempt `number` of `trial`, ready to send: its sbatch script."""
        script = build(
            self.study,
            self.renderer.render(trial, attempt=number, resume=number > 0),
            [self.renderer.dir, bundled_templates()],
            self.output,
        )
        # Slurm opens the job's --output file there before the script runs: it must exist
        (self.output / trial.name).mkdir(parents=True, exist_ok=True)
        return script

    def check(self, trial: Trial) -> None:
        """Build the first attempt without sending it (a client dry run)."""
        build(self.study, self.renderer.render(trial, attempt=0), [self.renderer.dir, bundled_templates()], self.output)

    def create(self, script: Script) -> None:
        self._known = True  # whatever its answer: it may have gone through
        self.slurm.submit(script.text, self.workdir)

    def find(self, script: Script) -> bool:
        """Whether the controller knows this attempt (or block) already (a send whose answer was lost)."""
        return self.slurm.find(script.job) is not None

    # -- merged submissions (core/merging.py): a block of first attempts as one job array --

    def block_size(self, largest: int) -> int:
        """Trials one block may carry: `largest` (core/merging.py), or fewer where the
        site's MaxArraySize is smaller (read once)."""
        if self._max_array is None:
            self._max_array = self.slurm.max_array_size() or largest
        return max(1, min(largest, self._max_array))  # task ids 0 to MaxArraySize - 1

    def prepare_block(self, trials: list[Trial], throttle: int) -> Script:
        """The next block of these trials' first attempts, ready to send: what differs from
        trial to trial in the block's task file, written once (`.blocks/<block>.tasks`, a
        line per array task), and the block's trials listed in `.blocks/<block>` (before it
        is sent: the block's tasks are known by their index, by every later run too). A
        trial's own directory is made by its task, where it runs."""
        blocks = self.output / BLOCKS
        blocks.mkdir(parents=True, exist_ok=True)
        taken = [int(p.name.split("-")[1]) for p in blocks.glob("block-*") if p.name.split("-")[1].isdigit()]
        block = f"block-{max(taken, default=0) + 1}"
        missing = [t for t in trials if t.name not in self.rendered]
        fresh = dict(zip([t.name for t in missing], self.renderer.render_all(missing, attempt=0)))
        tasks = [task_of(self.rendered.pop(t.name) if t.name in self.rendered else fresh[t.name]) for t in trials]
        prepared = block_script(
            self.study, block, tasks, throttle, [self.renderer.dir, bundled_templates()], self.output
        )
        (blocks / f"{block}{TASKS}").write_text("".join(task_line(t) for t in tasks), encoding="utf-8")
        (blocks / block).write_text("".join(f"{t.trial}\n" for t in tasks))
        return prepared

    def throttle(self, block: Attempt, tasks: int) -> None:
        """At most `tasks` of the block's tasks at once (its array's ArrayTaskThrottle)."""
        self.slurm.throttle(block.job.split("_")[0], tasks)

    # -- suspend and bring back ------------------------------------------------------------

    def hold(self, attempt: Attempt) -> None:
        """Keep a pending attempt from starting."""
        self.slurm.hold(attempt.job)

    def stop(self, attempt: Attempt) -> None:
        """Stop a running attempt and keep it, held, to resume from its checkpoint later.
        Slurm counts the requeue as a restart: the attempt's `.held` file counts those
        of drain, so they are not taken for preemptions."""
        held = self.output / attempt.trial / f"attempt-{attempt.attempt}.held"
        before = held_count(held)
        held.parent.mkdir(parents=True, exist_ok=True)
        held.write_text(f"{before + 1}\n")  # before the requeue: a loop never sees the restart uncounted
        try:
            self.slurm.requeue(attempt.job, hold=True)
        except BaseException:
            held.write_text(f"{before}\n")
            raise

    def give_up(self, attempt: Attempt, reason: str) -> None:
        """Recovery gave the trial up: marked, then its job (requeued after a preemption,
        or held) cancelled."""
        self.mark_given_up(attempt.trial, reason)
        if attempt.job and not attempt.state.finished:
            try:
                self.slurm.cancel(attempt.job)
            except Invalid:
                pass  # it ended meanwhile

    def release(self, attempt: Attempt) -> None:
        self.slurm.release(attempt.job)

    # -- a closed-loop search's pruner (backends/batch/search.py) --------------------------

    def reports(self, attempt: Attempt, metric: str) -> dict[int, float]:
        """The attempt's intermediate values of `metric` so far: the lines its ranks appended
        to `report.jsonl` in the trial's directory (stratctl.trial.report), the first rank's
        value of each step kept."""
        return reported_steps(self.output / attempt.trial / REPORT_FILE, attempt.attempt, metric)

    def prune(self, attempt: Attempt) -> None:
        """Stop a running attempt the pruner judged: `scancel` (SIGTERM to its steps, then
        SIGKILL after the cluster's KillWait); its job is not requeued."""
        if attempt.job and not attempt.state.finished:
            try:
                self.slurm.cancel(attempt.job)
            except Invalid:
                pass  # it ended meanwhile

    # -- logs and deletion -----------------------------------------------------------------

    def log_files(self, trial: str, name: str) -> list[tuple[str, Path]]:
        """The log of attempt `name` of a trial: its job's `--output` (the latest job's,
        when a lost answer made two), one file for the whole gang."""
        logs = (self.output / trial).glob(f"{name}-*.log")
        found = sorted((p for p in logs if p.name[len(name) + 1 : -4].isdigit()), key=lambda p: p.stat().st_mtime)
        return [("", found[-1])] if found else []

    def cancel(self, attempt: Attempt) -> None:
        """End a pending, running or held attempt (`stratctl delete`)."""
        self.slurm.cancel(attempt.job)

    # -- its driver (`submit --in-cluster`, driver.py) -------------------------------------

    def driver_gone(self, holder: str) -> bool:
        return holder_gone(self.slurm, holder)

    def driver(self) -> int | None:
        """The study's driver job, queued or running, if any."""
        found = running(self.slurm, self.study.name)
        return found.job if found else None

    def stop_driver(self) -> list[int]:
        """Cancel the study's driver job, if one is queued or running (`stratctl delete`)."""
        return stop(self.slurm, self.study.name)
