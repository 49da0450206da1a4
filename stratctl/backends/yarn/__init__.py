"""The YARN backend: stratctl's applications on a Hadoop YARN cluster, through the ResourceManager's REST API."""
