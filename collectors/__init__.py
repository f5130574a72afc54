"""Everything that observes the host: one collector per file, registered by name.

The name is the config table (``[collectors.npu_smi]``), the sample's ``collector`` field,
the store's ``collector.<name>`` status and the log field.
"""

from ascend_doctor.collectors.npu_smi import NpuSmiCollector
from ascend_doctor.collectors.process import ProcessCollector
from ascend_doctor.collectors.vllm import VllmCollector

REGISTRY: dict[str, type] = {
    NpuSmiCollector.name: NpuSmiCollector,
    VllmCollector.name: VllmCollector,
    ProcessCollector.name: ProcessCollector,
}
"""Every collector by its name."""

__all__ = ["REGISTRY", "NpuSmiCollector", "ProcessCollector", "VllmCollector"]
