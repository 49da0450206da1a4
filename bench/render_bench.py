"""Benchmark: expand and render 10,000 trials; print trials/s and peak memory.

    .venv/bin/python bench/render_bench.py [--trials N] [--baseline-trials N]

Measures, for a study like examples/demo.yaml but with N trials:
  - stratctl: `expand` + `Renderer(study, rendezvous=...)` + `render_all` (the per-study compiled path),
  - per-trial: the same Renderer forced onto its per-trial path (Jinja render + libyaml
    parse for every trial), which is what a user template with `{% if params... %}` gets,
  - naive baseline: a new sandboxed Jinja environment per trial, template rendered and
    parsed with PyYAML's pure-Python safe loader, template strings compiled per trial.
Time is wall-clock (perf_counter, best of --repeat); peak memory is measured in a
separate run under tracemalloc (which slows it down) plus the process's ru_maxrss.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml
from jinja2 import FileSystemLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import save  # noqa: E402
from stratctl.backends import rendezvous_for  # noqa: E402
from stratctl.core import sandbox  # noqa: E402
from stratctl.core.render import DEFAULT_TEMPLATES, Renderer, bundled_templates  # noqa: E402
from stratctl.core.space import expand  # noqa: E402
from stratctl.core.spec import load_study  # noqa: E402

STUDY = """\
name: bench
namespace: stratctl-e2e
queue: default
priority_class: stratctl-low
space:
  lr: {{type: loguniform, low: 1.0e-5, high: 1.0e-1}}
  momentum: {{type: uniform, low: 0.8, high: 0.99}}
  batch_size: {{type: choice, values: [32, 64, 128, 256]}}
  layers: {{type: int, low: 2, high: 48}}
strategy: {{kind: random, seed: 1, trials: {trials}}}
trial:
  image: busybox:1.36
  command: ["sh", "-c"]
  args: ["train --lr={{{{ params.lr }}}} --momentum={{{{ params.momentum }}}} --bs={{{{ params.batch_size }}}}"]
  env: {{LAYERS: "{{{{ params.layers }}}}", OUT: "{{{{ checkpoint }}}}"}}
  annotations: {{testbed.stratctl.io/run-duration: "15s"}}
  tasks:
    - name: worker
      replicas: 2
      resources: {{requests: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}, limits: {{nvidia.com/gpu: 1}}}}
    - name: ps
      replicas: 1
      resources: {{requests: {{cpu: "2", memory: 4Gi}}}}
checkpoint: {{location: "s3://bucket/{{{{ study }}}}/{{{{ trial }}}}"}}
"""


def run_fast(study):
    trials = expand(study)
    return Renderer(study, rendezvous=rendezvous_for(study)).render_all(trials)


def run_per_trial(study):
    trials = expand(study)
    renderer = Renderer(study, rendezvous=rendezvous_for(study))
    renderer._compiled = None  # force the per-trial path
    return renderer.render_all(trials)


def run_naive(study, n):
    """What a straightforward implementation does for each trial."""
    from stratctl.core.variables import study_context  # the same inputs, to compare like with like

    out = []
    for trial in expand(study)[:n]:
        env = sandbox.environment(FileSystemLoader(str(bundled_templates())))
        template = env.get_template(DEFAULT_TEMPLATES[study.workload])
        ctx = {
            **study_context(study),
            "job": trial.name,
            "trial": trial.name,
            "attempt": 0,
            "index": trial.index,
            "params": dict(trial.params),
            "resume": False,
            "checkpoint": "",
        }
        docs = list(yaml.load_all(template.render(ctx), Loader=yaml.SafeLoader))
        _fill_strings(docs, env, ctx)
        out.append(docs)
    return out


def _fill_strings(node, env, ctx):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in list(items):
        if isinstance(value, str) and sandbox.is_template(value):
            node[key] = env.from_string(value).render(ctx)
        else:
            _fill_strings(value, env, ctx)


def timed(fn, repeat):
    """Best wall-clock seconds of `repeat` runs, the CPU seconds of that run, the result."""
    best, cpu = float("inf"), float("inf")
    result = None
    for _ in range(repeat):
        result = None
        gc.collect()
        started, started_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall = time.perf_counter() - started
        if wall < best:
            best, cpu = wall, time.process_time() - started_cpu
    return best, cpu, result


def peak(fn):
    gc.collect()
    tracemalloc.start()
    result = fn()
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument(
        "--baseline-trials", type=int, default=1_000, help="the naive baseline is slow: run it on fewer"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(STUDY.format(trials=args.trials))
        study = load_study(path)

    n = args.trials
    fast_s, fast_cpu, docs = timed(lambda: run_fast(study), args.repeat)
    assert len(docs) == n
    manifest_bytes = len(yaml.dump(docs[0], Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    del docs
    slow_s, slow_cpu, _ = timed(lambda: run_per_trial(study), 1)
    m = min(args.baseline_trials, n)
    naive_s, naive_cpu, _ = timed(lambda: run_naive(study, m), 1)
    fast_peak = peak(lambda: run_fast(study))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"(other work on the machine slows every figure)"
    )
    print(f"study: {n:,} trials, Volcano Job with 2 tasks (3 pods) per trial, ~{manifest_bytes:,} bytes of YAML each")
    print()
    print(f"{'':40}{'wall s':>9}{'CPU s':>9}{'trials/s':>11}{'vs naive':>10}")
    naive_rate = m / naive_s
    for label, seconds, cpu, count in [
        (f"stratctl, per-study compiled ({n:,})", fast_s, fast_cpu, n),
        (f"stratctl, per-trial render ({n:,})", slow_s, slow_cpu, n),
        (f"naive baseline ({m:,})", naive_s, naive_cpu, m),
    ]:
        rate = count / seconds
        print(f"{label:40}{seconds:>9.3f}{cpu:>9.3f}{rate:>11,.0f}{rate / naive_rate:>9.1f}x")
    print()
    print(
        f"peak traced memory (expand + render {n:,}, manifests kept): {fast_peak / 2**20:,.1f} MiB; "
        f"process max RSS: {rss / 1024:,.1f} MiB"
    )
    verdict = "meets" if fast_s < 1.0 else "MISSES"
    print(
        f"target: {n:,} trials in < 1 s: {verdict} ({fast_s:.3f} s wall, {fast_cpu:.3f} s CPU, best of {args.repeat})"
    )
    if fast_cpu < 0.8 * fast_s:
        print("note: CPU time well below wall time: this process was waiting for a CPU (a busy machine)")
    save(
        "render",
        {
            "trials": n,
            "load_average": round(load[0], 2),
            "bytes_per_trial": manifest_bytes,
            "compiled": {
                "seconds": round(fast_s, 3),
                "cpu_seconds": round(fast_cpu, 3),
                "trials_per_second": round(n / fast_s),
            },
            "per_trial": {"seconds": round(slow_s, 3), "trials_per_second": round(n / slow_s)},
            "naive": {"trials": m, "seconds": round(naive_s, 3), "trials_per_second": round(naive_rate)},
            "compiled_vs_naive": round(n / fast_s / naive_rate, 1),
            "peak_traced_mib": round(fast_peak / 2**20, 1),
            "max_rss_mib": round(rss / 1024, 1),
        },
    )


if __name__ == "__main__":
    main()
