"""What a shadow run found: frozen records, each with a JSON-ready ``to_dict``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SCHEMA = "kvstress.shadow/1"


@dataclass(frozen=True)
class BlockBlame:
    """The block holding the first position whose K/V read back differed from what was written.

    ``state`` and ``refcount`` are read through the handle right after the divergence (a live
    view: what the pool says about the block now); ``refcount`` is None when the block has none.
    """

    block_id: int
    position: int  # in the sequence
    slot: int  # in the block
    layer: int
    kind: str  # "K" or "V"
    max_abs_diff: float  # written vs read, on that position
    state: str
    refcount: int | None


@dataclass(frozen=True)
class Divergence:
    """The first step where the paged logits left the reference's by more than the tolerance.

    ``step`` counts the sequence's own steps from 0 (a fork's from its fork point); ``position``
    is the token's position. Both sides were fed the same token (the reference's), so
    ``reference_token`` and ``paged_token`` are each side's argmax at this step.
    ``block`` is None only when no K/V read back differed (then the drift is not the pool's).
    """

    seed: int
    strategy: str  # "random", "pct" (controlled) or "free" (real threads)
    sequence: str
    step: int
    position: int
    max_abs_diff: float
    reference_token: int
    paged_token: int
    block: BlockBlame | None
    schedule: str | None  # the ks1: schedule of a controlled execution


@dataclass(frozen=True)
class PoolFailure:
    """The pool failed in a way that is not output drift: it raised (``crash``), stopped
    answering (``hang``), could not hand out all its blocks once every sequence had released
    them (``lost-block``), or handed one block out twice then (``shared-block``)."""

    seed: int
    strategy: str
    invariant: str
    message: str


@dataclass(frozen=True)
class ShadowResult:
    """A whole shadow run: how much was compared, and the first divergence or failure, if any.

    ``max_abs_diff`` is the largest |paged - reference| logit difference seen on steps that
    matched (the float noise a correct pool shows); ``tolerance`` is the bound a step must
    exceed to count as a divergence.
    """

    pool: str
    model: str
    mode: str  # "controlled" or "free"
    first_seed: int
    seeds: int
    executions: int
    steps_compared: int
    max_abs_diff: float
    tolerance: float
    elapsed_s: float
    divergence: Divergence | None = None
    failure: PoolFailure | None = None

    @property
    def clean(self) -> bool:
        """No divergence and no pool failure."""
        return self.divergence is None and self.failure is None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, with ``schema`` first."""
        return {"schema": SCHEMA, **asdict(self)}
