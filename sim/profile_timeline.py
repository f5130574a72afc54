"""The device timeline of a simulated capture: decode steps of a tensor-parallel group.

One timeline is built for all ranks at once, in lockstep, because the ranks meet at every
all-reduce: a rank that arrives late makes the others wait, and a rank whose link is slow
makes the others wait for its data. The files of a capture (``sim/profile_files.py``) are
all derived from it, so they agree with each other the way a real capture's do.

Shapes follow a decode step of a dense model on vLLM-Ascend: per layer RmsNorm, MatMul
(qkv), FusedInferAttentionScore, MatMul (o_proj), an all-reduce when TP > 1, Add, RmsNorm,
MatMul (gate_up), SwiGlu, MatMul (down), an all-reduce, Add; before the step the input ids
go host->device and after it the sampled ids come back device->host (``MEMCPY_ASYNC``
tasks, the second one behind a blocking ``aclrtMemcpy`` on the host). Durations are in the
range kernel_details.csv shows for a 7B-class model on a 910B (the shapes come from
Ascend/msprof-analyze's published kernel_details.csv fixtures); they are not a benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# (operator type, kernel name, accelerator core, us) of one layer; "ALLREDUCE" marks a
# collective.
LAYER = (
    ("RmsNorm", "aclnnRmsNorm_RmsNorm_RmsNorm", "AI_VECTOR_CORE", 18.4),
    ("MatMulV2", "aclnnMatmul_MatMulV2_MatMulV2", "AI_CORE", 212.6),
    ("FusedInferAttentionScore", "aclnnFusedInferAttentionScore_FIA", "MIX_AIC", 133.1),
    ("MatMulV2", "aclnnMatmul_MatMulV2_MatMulV2", "AI_CORE", 96.2),
    ("ALLREDUCE", "", "HCCL", 0.0),
    ("Add", "aclnnAdd_AddAiCore_Add", "AI_VECTOR_CORE", 9.3),
    ("RmsNorm", "aclnnRmsNorm_RmsNorm_RmsNorm", "AI_VECTOR_CORE", 18.4),
    ("MatMulV2", "aclnnMatmul_MatMulV2_MatMulV2", "AI_CORE", 301.7),
    ("SwiGlu", "aclnnSwiGlu_SwiGlu_SwiGlu", "AI_VECTOR_CORE", 27.8),
    ("MatMulV2", "aclnnMatmul_MatMulV2_MatMulV2", "AI_CORE", 151.0),
    ("ALLREDUCE", "", "HCCL", 0.0),
    ("Add", "aclnnAdd_AddAiCore_Add", "AI_VECTOR_CORE", 9.3),
)
LAYERS = 3
"""Layers written per step: enough for the shape, few enough to keep the files small."""
LAUNCH_GAP_US = 3.2
"""Gap between two kernels of one stream (the launch latency a timeline shows)."""
ALLREDUCE_US = 38.5
"""Transit time of one small decode all-reduce over HCCS."""
H2D_US, D2H_US, HOST_COPY_US = 6.4, 5.1, 31.0
"""Input-id copy, sampled-id copy, and the host's blocking wait on the latter."""
HOST_STEP_US = 1400.0
"""Host time between two steps under load: scheduling, sampling, detokenising."""
MAX_STEPS = 24
"""Steps written; a longer window is represented by its first steps, at its load."""


@dataclass(frozen=True)
class Slow:
    """A slow part injected on one rank (the demo's performance regression)."""

    rank: int
    """The rank that is slow."""
    part: str
    """``operator`` (one operator type runs slower) or ``collective`` (its link is slow)."""
    factor: float = 3.0
    """How many times slower."""
    operator: str = "MatMulV2"
    """The operator type slowed when ``part`` is ``operator``."""


@dataclass(frozen=True)
class Task:
    """One device task of one rank."""

    op_type: str
    name: str
    core: str
    start_us: float
    dur_us: float
    task_id: int
    wait_us: float = 0.0
    """For a collective: the part spent waiting for the other ranks."""

    @property
    def end_us(self) -> float:
        """End of the task."""
        return self.start_us + self.dur_us


@dataclass
class RankTimeline:
    """Everything one rank did in the capture."""

    rank: int
    device: int
    tasks: list[Task] = field(default_factory=list)
    host_copies: list[tuple[float, float]] = field(default_factory=list)
    """(start us, duration us) of blocking aclrtMemcpy calls."""
    steps: list[tuple[float, float]] = field(default_factory=list)
    """(start us, end us) of each step, the host gap after it included."""


def steps_for(window_us: float, tokens: int | None) -> tuple[int, float]:
    """(steps to write, host gap after each step) for a window with ``tokens`` generated.

    Unknown load counts as a saturated server: a capture is taken under load. Light load
    means few steps spread over the window, so the gaps (free time) grow: the split is
    shaped by the load, as a real capture's is.
    """
    busy = _busy_step_us()
    if tokens is None:
        real = max(1, int(window_us // (busy + HOST_STEP_US)))
    else:
        real = max(1, tokens)
    period = max(busy + HOST_STEP_US, window_us / real)
    return min(real, MAX_STEPS), period - busy


def _busy_step_us() -> float:
    ops = sum(d + LAUNCH_GAP_US for *_, d in LAYER) + 2 * (ALLREDUCE_US + LAUNCH_GAP_US)
    return LAYERS * ops + H2D_US + D2H_US


def build(
    devices: list[int], start_us: float, steps: int, gap_us: float, slow: Slow | None = None
) -> list[RankTimeline]:
    """The timelines of all ranks (rank i on ``devices[i]``), in lockstep."""
    ranks = [RankTimeline(i, d) for i, d in enumerate(devices)]
    ids = [1] * len(ranks)
    t = start_us

    def put(r: int, task: Task) -> None:
        ranks[r].tasks.append(task)
        ids[r] += 1

    def factor(r: int, op_type: str) -> float:
        if slow and slow.part == "operator" and slow.rank == r and slow.operator == op_type:
            return slow.factor
        return 1.0

    for _ in range(steps):
        step_start = t
        now = [t] * len(ranks)
        for r in range(len(ranks)):
            put(r, Task("MEMCPY_ASYNC", "MEMCPY_ASYNC", "MEMCPY_ASYNC", now[r], H2D_US, ids[r]))
            now[r] += H2D_US + LAUNCH_GAP_US
        for layer in range(LAYERS):
            for op_type, name, core, dur in LAYER:
                if op_type == "ALLREDUCE":
                    if len(ranks) > 1:
                        _allreduce(ranks, now, ids, layer, slow)
                    continue
                for r in range(len(ranks)):
                    d = dur * factor(r, op_type)
                    put(r, Task(op_type, name, core, now[r], d, ids[r]))
                    now[r] += d + LAUNCH_GAP_US
        for r in range(len(ranks)):
            put(r, Task("MEMCPY_ASYNC", "MEMCPY_ASYNC", "MEMCPY_ASYNC", now[r], D2H_US, ids[r]))
            ranks[r].host_copies.append((now[r] - 1.0, HOST_COPY_US))
            now[r] += D2H_US
        t = max(now) + gap_us
        for rt in ranks:
            rt.steps.append((step_start, t))
    return ranks


def _allreduce(
    ranks: list[RankTimeline], now: list[float], ids: list[int], layer: int, slow: Slow | None
) -> None:
    """One all-reduce: every rank ends when the last has arrived and the data has moved."""
    extra = ALLREDUCE_US * (slow.factor - 1) if slow and slow.part == "collective" else 0.0
    arrive = max(now)
    end = arrive + ALLREDUCE_US + extra
    seq = len(ranks[0].tasks)
    for r, rt in enumerate(ranks):
        mine_slow = slow is not None and slow.part == "collective" and slow.rank == r
        # The slow link's own rank moves data the whole time; the others wait for its data.
        wait = arrive - now[r] + (0.0 if mine_slow else extra)
        name = f"hcom_allReduce__{seq % 1000:03d}_{layer}_1"
        rt.tasks.append(
            Task("hcom_allReduce_", name, "HCCL", now[r], end - now[r], ids[r], wait_us=wait)
        )
        ids[r] += 1
        now[r] = end + LAUNCH_GAP_US


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of [start, end) intervals, sorted."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def subtract(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Parts of merged intervals ``a`` not covered by merged intervals ``b``."""
    out: list[tuple[float, float]] = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out
