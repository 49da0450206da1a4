"""Merged submissions' blocks: many trials as one Indexed Job (and the ConfigMap of their
scripts), rendered, read back and stopped one index at a time."""
