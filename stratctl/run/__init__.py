"""The submit loop and its decisions: throttle, policy, signals, recovery, drain, status reading."""
