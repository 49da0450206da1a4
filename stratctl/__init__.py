"""stratctl: launch strategy-parallel searches onto Volcano-scheduled Kubernetes clusters."""

__version__ = "0.1.0"
