"""stratctl: launch strategy-parallel searches onto Kubernetes (Volcano), Slurm and YARN clusters."""

from stratctl.version import VERSION as __version__

__all__ = ["__version__", "report"]


def report(step: int, flush: bool = False, **values: float) -> bool:
    """Report a running trial's intermediate values (`stratctl report --step N loss=0.41`):
    `stratctl.report(3, loss=0.41)`. Written to the trial's pod at most every 5 s (`flush`:
    now); True when this call wrote. For the study's pruner (docs/study-file.md).

    It never stops the training that calls it: a report that cannot be written (no rights,
    the API server out of reach) is said on stderr, once per kind of failure, and False is
    returned; the next report tries again."""
    import sys

    from stratctl.backends.kubernetes.search.intermediate import report as write
    from stratctl.errors import StratctlError

    try:
        return write(step, {k: float(v) for k, v in values.items()}, flush=flush)
    except StratctlError as exc:
        if type(exc) not in _said:
            _said.add(type(exc))
            print(f"stratctl.report: not written ({exc}); training goes on", file=sys.stderr)
        return False


_said: set[type] = set()  # kinds of report failures said already
