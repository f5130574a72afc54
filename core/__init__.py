"""The ground floor: events, config, the store, the error tree. Imports nothing else."""

__all__ = ["config", "errors", "events", "store"]
