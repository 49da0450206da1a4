"""The Kubernetes submit loop: the shared cycle's steps over a study's jobs (controller.py),
what it reads each cycle, and the capabilities only Kubernetes adds."""
