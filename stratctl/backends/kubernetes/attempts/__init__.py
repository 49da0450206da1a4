"""A trial's attempts sent to the cluster: first attempts created exactly once, the next after
a preemption, suspension or failure, in the first queue with room."""
