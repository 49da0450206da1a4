"""stratctl: launch strategy-parallel searches onto Volcano-scheduled Kubernetes clusters."""

__version__ = "0.1.0"


def report(step: int, flush: bool = False, **values: float) -> bool:
    """Report a running trial's intermediate values (`stratctl report --step N loss=0.41`):
    `stratctl.report(3, loss=0.41)`. Written to the trial's pod at most every 5 s (`flush`:
    now); True when this call wrote. For the study's pruner (see the README)."""
    from stratctl.engine.intermediate import report as write

    return write(step, {k: float(v) for k, v in values.items()}, flush=flush)
