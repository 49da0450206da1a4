"""Kubernetes: the API adapter (the only importer of `kubernetes`) and what Kubernetes objects say."""
