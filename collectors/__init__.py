"""Everything that observes the host: one collector per file, registered by name.

The name is the config table (``[collectors.npu_smi]``), the sample's ``collector`` field,
the store's collector status and the log field. The daemon runs every enabled entry of
:data:`REGISTRY`; the log tailer (``logs.py``) is the one source that is not a collector: it
hands chunks to the rules instead of samples.
"""

from ascend_doctor.collectors import canary, npu_smi, process, vllm
from ascend_doctor.collectors.base import Collector, CollectorContext, CollectorSpec

REGISTRY: dict[str, CollectorSpec] = {
    spec.name: spec for spec in (npu_smi.SPEC, vllm.SPEC, process.SPEC, canary.SPEC)
}
"""Every collector by its registered name, in the order they start."""

__all__ = ["REGISTRY", "Collector", "CollectorContext", "CollectorSpec"]
