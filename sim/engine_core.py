"""The effective configuration of one fake ``vllm serve``, shared by all of its processes.

The API server resolves it from argv and the environment (sim/vllm_args.py) and hands it to
the engine core process, which hands it to its workers, as vLLM passes its ``VllmConfig``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ServeConfig:
    """The effective configuration of one fake ``vllm serve``."""

    model: str
    """The model tag as given."""
    served_name: str
    """``--served-model-name`` (the model tag by default)."""
    host: str
    """Address the HTTP server binds."""
    port: int
    """Port the HTTP server binds."""
    max_model_len: int
    """Effective ``--max-model-len``."""
    gpu_memory_utilization: float
    """Effective ``--gpu-memory-utilization``."""
    max_num_seqs: int
    """Effective ``--max-num-seqs``."""
    block_size: int
    """Effective ``--block-size`` (vLLM-Ascend: 128)."""
    tensor_parallel_size: int
    """Effective ``--tensor-parallel-size``."""
    enforce_eager: bool
    """``--enforce-eager``: no ACL graph capture."""
    devices: list[int]
    """Physical ids of the cards, from ASCEND_RT_VISIBLE_DEVICES, one per rank."""
    expandable_segments: bool
    """PYTORCH_NPU_ALLOC_CONF has ``expandable_segments:True``."""
    non_default: dict[str, Any] = field(default_factory=dict)
    """What ``non-default args:`` prints."""
    executor: str = "uni"
    """``uni`` (the engine core holds the card) or ``mp`` (one worker process per rank)."""
    log_requests: bool = False
    """``--enable-log-requests``."""
    log_stats: bool = True
    """Not ``--disable-log-stats``: the periodic ``Engine 000:`` line."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict, to pass to a child process."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServeConfig:
        """The inverse of :meth:`to_json`."""
        return cls(**data)
