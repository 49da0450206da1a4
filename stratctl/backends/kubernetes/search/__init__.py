"""The closed-loop search's own side: the trials a sampler asks and is told, the values running
trials report, and the search mirrored into an Optuna storage."""
