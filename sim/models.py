"""Model profiles and the NPU memory arithmetic of the fake server.

The numbers follow how vLLM-Ascend budgets a 64 GiB 910B card: the utilization
share of HBM, minus the weights on this card, minus the activation peak of the
profiling run, is what remains for the KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2
HBM_GIB = 64.0
ACTIVATION_PEAK_GIB = 1.6
RUNTIME_RESERVE_GIB = 2.0
ACTIVATION_MIB_PER_TOKEN = 0.5
FRAGMENTED_SHARE = 0.7
"""Without expandable segments only this share of the headroom is usable."""
TOTAL_CAPACITY_GIB = 60.97
"""What torch_npu reports as total capacity of a 64 GiB card."""


@dataclass(frozen=True)
class ModelProfile:
    """What the fake server needs to know about a model."""

    name: str
    weights_gib: float
    kv_bytes_per_token: int
    """layers x kv heads x head dim x 2 (K and V) x 2 bytes (bf16)."""
    max_position: int
    architecture: str


def _kv(layers: int, kv_heads: int, head_dim: int = 128) -> int:
    return layers * kv_heads * head_dim * 2 * 2


MODELS: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile("Qwen/Qwen2.5-7B-Instruct", 14.19, _kv(28, 4), 32768, "Qwen2ForCausalLM"),
        ModelProfile("Qwen/Qwen2.5-14B-Instruct", 27.51, _kv(48, 8), 32768, "Qwen2ForCausalLM"),
        ModelProfile("Qwen/Qwen2.5-32B-Instruct", 61.03, _kv(64, 8), 32768, "Qwen2ForCausalLM"),
        ModelProfile("Qwen/Qwen2.5-72B-Instruct", 135.43, _kv(80, 8), 32768, "Qwen2ForCausalLM"),
        ModelProfile("Qwen/Qwen3-8B", 15.26, _kv(36, 8), 40960, "Qwen3ForCausalLM"),
        ModelProfile(
            "meta-llama/Llama-3.1-8B-Instruct", 14.99, _kv(32, 8), 131072, "LlamaForCausalLM"
        ),
    )
}

_DEFAULT = ModelProfile("default", 14.19, _kv(28, 4), 32768, "Qwen2ForCausalLM")


def get_profile(model: str) -> ModelProfile:
    """Profile of ``model``; unknown names (local paths too) get a 7B-class default."""
    known = MODELS.get(model)
    if known is not None:
        return known
    return ModelProfile(
        model,
        _DEFAULT.weights_gib,
        _DEFAULT.kv_bytes_per_token,
        _DEFAULT.max_position,
        _DEFAULT.architecture,
    )


@dataclass(frozen=True)
class MemoryPlan:
    """The KV cache budget of one card for one configuration."""

    weights_gib: float
    """Weights held by one card (the model split over tensor parallel ranks)."""
    available_bytes: int
    """KV cache memory left; <= 0 means no cache block fits at all."""
    block_size: int
    num_gpu_blocks: int
    kv_bytes_per_token: int

    @property
    def available_gib(self) -> float:
        """Available KV cache memory in GiB."""
        return self.available_bytes / GIB

    @property
    def capacity_tokens(self) -> int:
        """Tokens the KV cache holds (whole blocks only)."""
        return self.num_gpu_blocks * self.block_size

    def needed_bytes(self, max_model_len: int) -> int:
        """KV cache one request of ``max_model_len`` tokens needs."""
        return max_model_len * self.kv_bytes_per_token

    def estimated_max_len(self) -> int:
        """Longest sequence the available memory would hold."""
        return max(0, self.available_bytes // self.kv_bytes_per_token)


def plan_memory(
    profile: ModelProfile, utilization: float, tensor_parallel: int, block_size: int
) -> MemoryPlan:
    """Compute the KV cache budget the way the fake engine reports it at start-up."""
    weights = profile.weights_gib / max(1, tensor_parallel)
    # KV heads are split over tensor parallel ranks too (at least one head per rank).
    per_token = max(1, profile.kv_bytes_per_token // max(1, tensor_parallel))
    available = int((HBM_GIB * utilization - weights - ACTIVATION_PEAK_GIB) * GIB)
    blocks = max(0, available // (block_size * per_token)) if available > 0 else 0
    return MemoryPlan(weights, available, block_size, blocks, per_token)


@dataclass(frozen=True)
class Headroom:
    """Memory outside the vLLM budget that activations of one step may use."""

    usable_bytes: int
    reserved_bytes: int
    allocated_bytes: int


def activation_headroom(plan: MemoryPlan, utilization: float, expandable: bool) -> Headroom:
    """Headroom for activations; fragmentation eats 30% without expandable segments."""
    raw = (HBM_GIB * (1.0 - utilization) - RUNTIME_RESERVE_GIB) * GIB
    usable = raw if expandable else raw * FRAGMENTED_SHARE
    allocated = int((plan.weights_gib * GIB) + max(0, plan.available_bytes))
    reserved = int(HBM_GIB * utilization * GIB)
    return Headroom(int(max(0.0, usable)), reserved, allocated)


def activation_bytes(prompt_tokens: int) -> int:
    """Activation memory a prefill of ``prompt_tokens`` needs."""
    return int(prompt_tokens * ACTIVATION_MIB_PER_TOKEN * MIB)


def fmt_gib(n_bytes: float) -> str:
    """Format like torch does in OOM messages (``2.93 GiB`` / ``512.00 MiB``)."""
    if abs(n_bytes) >= GIB:
        return f"{n_bytes / GIB:.2f} GiB"
    return f"{n_bytes / MIB:.2f} MiB"


def floor2(x: float) -> float:
    """Round down to 2 decimals so printed GiB never overstate memory."""
    return math.floor(x * 100) / 100
