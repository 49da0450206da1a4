"""What Kubernetes objects say, read from the dicts the API returns: a trial's state, its GPUs,
why its gang waits, the study record and the rows built from them."""
