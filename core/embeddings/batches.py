"""Batches for an encoder: texts sorted by length, grouped into runs, padded to static shapes.

:func:`plan_batches` groups texts of similar length (dynamic shapes: a run ends where the lengths
jump, so padding stays bounded) or puts each in the smallest sequence-length bucket that holds
it, with the same bucket accounting as LLM prefill
(:class:`~ryzenai_core.package.budget.ContextBudget`); :class:`BatchRun` runs a plan and says
what it cost; :func:`l2_normalize` scales pooled
vectors to unit length. numpy is imported only when a function runs.
"""

from __future__ import annotations

import dataclasses
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
    """One run of the model: which texts, padded to which shape.

    ``dynamic`` runs have the shape of their texts (the session takes any shape); the others
    have a static shape, a session of their own each.
    """

    indices: tuple[int, ...]
    rows: int
    length: int
    dynamic: bool = False

    @property
    def shape(self) -> tuple[int, int] | None:
        """The static ``(rows, length)`` whose session runs it; None for a dynamic run."""
        return None if self.dynamic else (self.rows, self.length)

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
    dynamic_up_to: int | None = None,
) -> list[Batch]:
    """Sort texts by length and group them into runs.

    Without buckets (dynamic shapes), each run holds up to ``batch_size`` texts of similar
    length padded to the longest of them, and ends where the lengths jump: a text joins the run
    only if the run's padding stays within ``max_padding`` of its real tokens (or
    :data:`PADDING_SLACK` tokens a row, whichever is more). So one long text among short ones
    runs on its own, at its own cost, instead of padding every short one to its length;
    ``max_padding=None`` groups by ``batch_size`` alone. With buckets (static shapes), each text
    goes to the smallest bucket that holds it (LLM prefill's accounting) and each run holds
    exactly ``static_rows`` rows of one bucket, filler rows included. With buckets and
    ``dynamic_up_to``, texts of at most that many tokens run in dynamic runs instead (an NPU
    engine's CPU session for inputs too small to be worth the NPU), before the static ones.

    The runs hold every text once; callers put each output back at its text's index.
    """
    if batch_size < 1:
        raise InvalidRequestError(f"batch_size is {batch_size}; it must be at least 1")
    if buckets and dynamic_up_to:
        small = [i for i, n in enumerate(lengths) if n <= dynamic_up_to]
        if small:
            rest = [i for i, n in enumerate(lengths) if n > dynamic_up_to]
            runs = plan_batches([lengths[i] for i in small], batch_size=batch_size, max_padding=max_padding)
            fixed = plan_batches(
                [lengths[i] for i in rest], batch_size=batch_size, buckets=buckets, static_rows=static_rows
            )
            return [
                dataclasses.replace(b, indices=tuple(among[i] for i in b.indices))
                for among, planned in ((small, runs), (rest, fixed))
                for b in planned
            ]
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
                batches.append(Batch(tuple(group), len(group), lengths[group[-1]], dynamic=True))
                group, real = [], 0
            group.append(i)
            real += n
        if group:
            batches.append(Batch(tuple(group), len(group), lengths[group[-1]], dynamic=True))
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

    def input_shapes(self) -> list[tuple[int, int] | None]:
        """The session shape that ran each input, in input order (None: a dynamic session)."""
        out: list[tuple[int, int] | None] = [None] * len(self.lengths)
        for b in self.batches:
            for i in b.indices:
                out[i] = b.shape
        return out

    @property
    def padding(self) -> int:
        """Padding tokens over every run (filler rows included)."""
        return sum(b.rows * b.length for b in self.batches) - sum(self.lengths)
