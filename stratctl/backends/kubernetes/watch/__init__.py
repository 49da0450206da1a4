"""What the submit loop watches: list-then-watch caches of the cluster's objects, the capacity
they add up to, the pods taken away, and Prometheus' signals."""
