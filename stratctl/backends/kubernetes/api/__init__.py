"""The API client: requests, watches and streams to one API server, its credentials and
connections, and its answers read (the only importer of `kubernetes` is cluster.py)."""
