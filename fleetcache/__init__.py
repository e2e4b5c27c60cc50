"""fleetcache: pre-warm LLM weights across a fleet of Kubernetes clusters with Crossplane."""

__version__ = "0.1.0"
