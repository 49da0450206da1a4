"""The commands on a study in the cluster, each once and done: `status`, `drain`/`resume`,
`delete`, `logs`, `rbac`, preflight, an edited study's revision, names for the shell."""
