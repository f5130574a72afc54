"""ascend-doctor: diagnostics and remediation for vLLM-Ascend servers on Ascend NPUs."""

__version__ = "0.1.0"
"""The one place the version is written: ``pyproject.toml`` reads it from here (setuptools'
``attr:``), so an installed and a source tree agree, and ``--version`` reads no package
metadata (``importlib.metadata`` cost more than the rest of the command)."""

__all__ = ["__version__"]
