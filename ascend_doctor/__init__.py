"""ascend-doctor: diagnostics and remediation for vLLM-Ascend servers on Ascend NPUs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ascend-doctor")
except PackageNotFoundError:  # running from a tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
