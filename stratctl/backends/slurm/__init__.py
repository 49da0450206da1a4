"""The Slurm backend: each trial attempt an sbatch job, submitted, observed and requeued
through Slurm's own commands (sbatch, squeue --json, scontrol, scancel)."""
