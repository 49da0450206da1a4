"""The study core: the study file, its search space, rendering and cost. Never reaches a cluster."""
