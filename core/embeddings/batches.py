"""Batches for an encoder: texts sorted by length, grouped into runs, padded to static shapes.

:func:`plan_batches` groups texts of similar length (dynamic shapes: a run ends where the lengths
jump, so padding stays bounded) or puts each in the smallest sequence-length bucket that holds
it, with the same bucket accounting as LLM prefill
(:class:`~ryzenai_core.package.budget.ContextBudget`); :class:`BatchRun` runs a plan and says
what it cost; :func:`l2_normalize` scales pooled
vectors to unit length. numpy is imported only when a function runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidRequestError
from ..package.budget import ContextBudget

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MAX_PADDING", "PADDING_SLACK", "Batch", "BatchRun", "l2_normalize", "plan_batches"]

#: A dynamic run pads at most this share of its real tokens (or :data:`PADDING_SLACK` a row).
MAX_PADDING = 0.5
#: Padding tokens a row that a dynamic run may always have: texts of nearly one length stay together.
PADDING_SLACK = 8


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as torch's ``F.normalize``."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.clip(norms, 1e-12, None), dtype=np.float32)


@dataclass(frozen=True)
class Batch:
    """One run of the model: which texts, padded to which shape."""

    indices: tuple[int, ...]
    rows: int
    length: int

    @property
    def filler_rows(self) -> int:
        """Rows of pure padding (a static batch larger than the texts left)."""
        return self.rows - len(self.indices)


def plan_batches(
    lengths: Sequence[int],
    *,
    batch_size: int,
    buckets: Sequence[int] | None = None,
    static_rows: int | None = None,
    max_padding: float | None = MAX_PADDING,
) -> list[Batch]:
    """Sort texts by length and group them into runs.

    Without buckets (dynamic shapes), each run holds up to ``batch_size`` texts of similar
    length padded to the longest of them, and ends where the lengths jump: a text joins the run
    only if the run's padding stays within ``max_padding`` of its real tokens (or
    :data:`PADDING_SLACK` tokens a row, whichever is more). So one long text among short ones
    runs on its own, at its own cost, instead of padding every short one to its length;
    ``max_padding=None`` groups by ``batch_size`` alone. With buckets (static shapes), each text
    goes to the smallest bucket that holds it (LLM prefill's accounting) and each run holds
    exactly ``static_rows`` rows of one bucket, filler rows included.

    The runs hold every text once; callers put each output back at its text's index.
    """
    if batch_size < 1:
        raise InvalidRequestError(f"batch_size is {batch_size}; it must be at least 1")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[Batch] = []
    if not buckets:
        group: list[int] = []
        real = 0  # the group's real tokens
        for i in order:
            n = lengths[i]  # the longest yet (sorted): the group would pad to it
            rows = len(group) + 1
            padding = rows * n - real - n
            jump = max_padding is not None and padding > max(max_padding * (real + n), PADDING_SLACK * rows)
            if group and (len(group) == batch_size or jump):
                batches.append(Batch(tuple(group), len(group), lengths[group[-1]]))
                group, real = [], 0
            group.append(i)
            real += n
        if group:
            batches.append(Batch(tuple(group), len(group), lengths[group[-1]]))
        return batches
    longest = max(buckets)
    budget = ContextBudget(window=longest + 1, prompt_limit=longest, prefill_buckets=tuple(sorted(buckets)))
    rows = static_rows or 1
    by_bucket: dict[int, list[int]] = {}
    for i in order:
        bucket = budget.prefill_bucket(lengths[i])
        assert bucket is not None and bucket <= longest, (lengths[i], buckets)
        by_bucket.setdefault(bucket, []).append(i)
    for bucket in sorted(by_bucket):
        members = by_bucket[bucket]
        for start in range(0, len(members), rows):
            batches.append(Batch(tuple(members[start : start + rows]), rows, bucket))
    return batches


@dataclass(frozen=True)
class BatchRun:
    """A call's planned batches, run in turn by iterating (each batch with its output).

    ``lengths`` are the inputs' token counts; ``progress`` is called with the number of inputs
    done after each batch. The shapes and the padding are the plan's (each input is in one batch).
    """

    lengths: list[int]
    batches: list[Batch]
    run: Callable[[Batch], np.ndarray]
    progress: Callable[[int], None] | None = None

    def __iter__(self) -> Iterator[tuple[Batch, np.ndarray]]:
        done = 0
        for batch in self.batches:
            yield batch, self.run(batch)
            done += len(batch.indices)
            if self.progress is not None:
                self.progress(done)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """``(rows, sequence)`` of each run, in order."""
        return [(b.rows, b.length) for b in self.batches]

    @property
    def padding(self) -> int:
        """Padding tokens over every run (filler rows included)."""
        return sum(b.rows * b.length for b in self.batches) - sum(self.lengths)
