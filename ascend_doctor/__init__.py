"""ascend-doctor: diagnostics and remediation for vLLM-Ascend servers on Ascend NPUs."""

from typing import Any


def __getattr__(name: str) -> Any:
    # read on first use: importlib.metadata costs more than a command like --version itself
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("ascend-doctor")
        except PackageNotFoundError:  # running from a tree that is not installed
            value = "0.0.0"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__"]
