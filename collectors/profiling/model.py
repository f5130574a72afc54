"""What the analysis of a capture says, as frozen records that turn into JSON.

Times are microseconds, like every file a capture holds (torch_npu's profiler guide, "Output
Result File Description"; msprof's "Profile Data File Reference"). A share is a fraction of
0..1; the renderer turns it into a percentage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepSplit:
    """Where one rank's step time went, summed over the steps of the capture."""

    computing_us: float
    """Time the NPU ran compute tasks (``Computing``)."""
    communication_not_overlapped_us: float
    """Communication not hidden under compute (``Communication(Not Overlapped)``)."""
    free_us: float
    """Time the NPU ran nothing: host dispatch, Python, waiting for requests (``Free``)."""
    overlapped_us: float = 0.0
    """Communication hidden under compute (``Overlapped``); not part of the step total."""
    steps: int = 1
    """Steps the sums cover (rows of step_trace_time.csv; 1 when the capture has no steps)."""
    source: str = ""
    """The file the split was read from."""

    @property
    def total_us(self) -> float:
        """Step time: computing + communication not overlapped + free."""
        return self.computing_us + self.communication_not_overlapped_us + self.free_us

    @property
    def per_step_us(self) -> float:
        """Average time of one step."""
        return self.total_us / max(1, self.steps)

    def parts(self) -> dict[str, float]:
        """The three parts of the step time by name, in report order."""
        return {
            "computing": self.computing_us,
            "communication not overlapped": self.communication_not_overlapped_us,
            "free": self.free_us,
        }


@dataclass(frozen=True)
class OperatorTime:
    """One operator type's device time on one rank."""

    name: str
    """Operator type (``MatMulV2``, ``FusedInferAttentionScore``, ``hcom_allReduce_``...)."""
    core: str
    """Accelerator core or task type (``AI_CORE``, ``AI_VECTOR_CORE``, ``HCCL``...)."""
    count: int
    """Calls in the capture."""
    total_us: float
    """Total device time of those calls."""
    share: float
    """Fraction of all operator time on this rank."""


@dataclass(frozen=True)
class CopyTime:
    """Host<->device memory copies on one rank."""

    device_us: float
    """Device time of ``MEMCPY_ASYNC`` tasks (asynchronous copies)."""
    device_count: int
    """Number of those tasks."""
    host_blocking_us: float
    """Host time inside blocking ``aclrtMemcpy`` calls, which stall the Python thread."""
    host_blocking_count: int
    """Number of those calls."""
    share: float
    """(device + host blocking) / step time; 0 when the step time is unknown."""

    @property
    def total_us(self) -> float:
        """All copy time, device and blocking host."""
        return self.device_us + self.host_blocking_us


@dataclass(frozen=True)
class CollectiveTime:
    """One collective type on one rank, from communication.json."""

    name: str
    """Collective type (``hcom_allReduce_``, ``hcom_allGather_``...)."""
    count: int
    """Calls in the capture."""
    elapse_us: float
    """Total elapsed time."""
    wait_us: float
    """Part of it spent waiting for the other ranks (``Wait Time``)."""
    transit_us: float
    """Part of it moving data (``Transit Time``)."""


@dataclass(frozen=True)
class RankProfile:
    """Everything the analysis found for one rank (one device) of a capture."""

    rank: int
    """Rank id (``profiler_info_{rank}.json``, msprof ``rank_id``), else the device id."""
    path: str
    """Directory of this rank's capture."""
    layout: str
    """``torch_npu``, ``msprof`` or ``cluster`` (msprof-analyze's cluster output)."""
    split: StepSplit | None
    """Step time split; None when no file of the capture carries it."""
    top_operators: tuple[OperatorTime, ...] = ()
    """Operator types by total device time, largest first."""
    copies: CopyTime | None = None
    """Host<->device copies; None when the capture has no timeline."""
    collectives: tuple[CollectiveTime, ...] = ()
    """Collectives by elapsed time, largest first."""
    files: tuple[str, ...] = ()
    """Files the figures were read from, relative to ``path``."""


@dataclass(frozen=True)
class SlowRank:
    """The slowest rank and what makes it slow."""

    rank: int
    """The slowest rank."""
    own_us: float
    """Its own time per step: computing + free, what the other ranks wait for."""
    others_us: float
    """Median own time per step of the other ranks."""
    reason: str
    """Why it is the slowest, in words (``the other ranks wait for it`` ...)."""
    part: str
    """The part of the split that grew most against the others."""
    part_gap_us: float
    """How much that part grew, per step."""
    operator: str = ""
    """The operator (or collective) whose time grew most against the others, if any."""
    operator_gap_us: float = 0.0
    """How much its total time grew."""
    wait_gap_us: float = 0.0
    """How much longer the other ranks wait in collectives than it does (median)."""

    @property
    def gap_us(self) -> float:
        """Own time per step above the other ranks' median."""
        return self.own_us - self.others_us

    @property
    def gap_share(self) -> float:
        """The gap as a fraction of the others' step time."""
        return self.gap_us / self.others_us if self.others_us > 0 else 0.0


@dataclass(frozen=True)
class AdvisorFinding:
    """One finding of msprof-analyze's advisor, quoted as it said it."""

    category: str
    """Its section title (``AICPU Issues``, ``Operator Dynamic Shape Issues``...)."""
    priority: str
    """``high``, ``medium`` or ``low``."""
    description: str
    """Its description."""
    suggestion: str
    """Its suggestion."""


@dataclass(frozen=True)
class ProfileReport:
    """The analysis of one capture directory: every rank, the slowest, the verdict."""

    root: str
    """The directory analysed."""
    ranks: tuple[RankProfile, ...]
    """One entry per rank, by rank id."""
    slowest: SlowRank | None
    """The slowest rank; None with fewer than two ranks that have a split."""
    headline: str
    """One sentence naming the slow part."""
    advisor: tuple[AdvisorFinding, ...] = ()
    """msprof-analyze advisor findings of high priority."""
    advisor_status: str = "not run"
    """``ran``, ``not installed``, ``not run`` or why it failed."""
    problems: tuple[str, ...] = field(default=())
    """Files that could not be read, each with the reason; the rest is still analysed."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (what ``--json`` prints)."""
        data = asdict(self)
        for rank, out in zip(self.ranks, data["ranks"], strict=True):
            if rank.split is not None:
                out["split"]["total_us"] = rank.split.total_us
                out["split"]["per_step_us"] = rank.split.per_step_us
            if rank.copies is not None:
                out["copies"]["total_us"] = rank.copies.total_us
        if self.slowest is not None:
            data["slowest"]["gap_us"] = self.slowest.gap_us
            data["slowest"]["gap_share"] = self.slowest.gap_share
        return data
