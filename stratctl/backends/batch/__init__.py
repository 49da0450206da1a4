"""Batch schedulers that run an attempt as one job (Slurm, YARN): the `Scheduler` protocol they
implement (scheduler.py) and what runs over it, the same for each: the cycle's steps
(loop.py), `status`, `drain`/`resume`, `logs`, `delete`, and the studies they know by name."""
