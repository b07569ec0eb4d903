"""Bucket-aware context packing: retrieved context that ends at a prefill bucket edge.

The NPU pads every prompt up to a precompiled prefill shape (see :mod:`ryzenai_core.package.budget`).
A retrieval pipeline that sends "the top k chunks" lands wherever their lengths happen to add
up: 1030 tokens costs a 1536-token prefill, 506 tokens of it padding. This module chooses the
context instead, from token counts alone (no framework, no model)::

    budget (ContextBudget), base_tokens (the prompt without context),
    candidates (token counts of ranked chunks, separators included)
      -> default packing   the ranked prefix that fits: what a plain pipeline sends
      -> bucket edges      prompt lengths that fill their padded prefill shape exactly
      -> for each edge up to the default's: first-fit the ranked chunks below it, cutting the
         next chunk short to land on the edge when allowed
      -> PackingPlan: the cheapest option (smallest padded prefill, then most context) whose
         padding and bucket are never larger than the default's, that loses at most
         ``max_context_loss`` of the default's context, and that never exceeds the prompt limit

Two moves come out of it: *fill* (the default's bucket has room: add chunks, or part of one,
until the prompt reaches the bucket edge: more context for the same prefill) and *trim* (the
default spills a few tokens into the next bucket: drop or cut the last ones to land on the edge
below: a smaller prefill for nearly the same context).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..errors import ContextWindowExceededError, InvalidRequestError
from .budget import BUCKET_STEP, ContextBudget

__all__ = [
    "PackedPrompt",
    "PackingPlan",
    "Strategy",
    "bucket_edges",
    "pack_context",
    "packing_limit",
    "padded_length",
]

Strategy = Literal["default", "fill", "trim"]


@dataclass(frozen=True)
class PackedPrompt:
    """One choice of context.

    Attributes:
        selected: indices of the candidates sent whole, ascending (rank order).
        partial: index of a candidate sent cut short (its first ``partial_tokens``), or None.
        partial_tokens: tokens kept of the ``partial`` candidate (0 without one).
        context_tokens: tokens of context: the selected candidates plus the partial part.
        prompt_tokens: ``base_tokens + context_tokens``.
        prefill_bucket: padded length of the (last) prefill run; None without buckets.
        padding: pad tokens over all prefill runs.
        padded_tokens: tokens the NPU prefills: ``prompt_tokens + padding``.
    """

    selected: tuple[int, ...]
    partial: int | None
    partial_tokens: int
    context_tokens: int
    prompt_tokens: int
    prefill_bucket: int | None
    padding: int
    padded_tokens: int


@dataclass(frozen=True)
class PackingPlan:
    """Default packing and bucket-aware packing of the same candidates.

    Attributes:
        default: the ranked prefix that fits the limit (at most ``default_count`` candidates).
        packed: the bucket-aware choice.
        strategy: ``fill`` (same bucket, more context), ``trim`` (a smaller bucket, a little
            less context) or ``default`` (nothing better was allowed).
        limit: the largest prompt allowed (prompt limit, and room for the output).
        target: the bucket edge the packed prompt aims at.
    """

    default: PackedPrompt
    packed: PackedPrompt
    strategy: Strategy
    limit: int
    target: int

    @property
    def padding_saved(self) -> int:
        """Pad tokens the NPU no longer computes (never negative)."""
        return self.default.padding - self.packed.padding

    @property
    def prefill_saved(self) -> int:
        """Padded prefill tokens saved: the smaller bucket of a trim (0 for a fill)."""
        return self.default.padded_tokens - self.packed.padded_tokens

    @property
    def context_added(self) -> int:
        """Context tokens gained (negative when a trim dropped some)."""
        return self.packed.context_tokens - self.default.context_tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the derived savings."""
        out = asdict(self)
        out.update(padding_saved=self.padding_saved, prefill_saved=self.prefill_saved, context_added=self.context_added)
        return out


def packing_limit(budget: ContextBudget, max_new_tokens: int | None = None) -> int:
    """The largest prompt to pack: the prompt limit, leaving ``max_new_tokens`` for the output.

    Args:
        budget: the package's budget.
        max_new_tokens: output tokens to keep room for (None: only the one token every
            generation needs).

    Raises:
        InvalidRequestError: ``max_new_tokens`` leaves no room for a prompt.
    """
    limit = budget.max_prompt_tokens
    if max_new_tokens is not None:
        if max_new_tokens < 1 or max_new_tokens >= budget.window:
            raise InvalidRequestError(
                f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the window of "
                f"{budget.window} tokens; use a value between 1 and {budget.window - 1}"
            )
        limit = min(limit, budget.window - max_new_tokens)
    return limit


def padded_length(budget: ContextBudget, prompt_tokens: int) -> int:
    """Tokens the NPU prefills for a prompt: its length plus padding, over all prefill runs.

    The same arithmetic as :meth:`ContextBudget.plan` (``prompt_tokens + plan.padding``), for
    any length >= 1 and without the limit checks. Without buckets it is the length itself.
    """
    if prompt_tokens < 1:
        raise InvalidRequestError(f"prompt_tokens is {prompt_tokens}; it must be at least 1")
    if not budget.prefill_buckets:
        return prompt_tokens
    step = budget.prefill_window
    if step is None:
        return _bucket(budget, prompt_tokens)
    full, rest = divmod(prompt_tokens, step)
    if rest == 0:
        full, rest = full - 1, step
    return full * _bucket(budget, step) + _bucket(budget, rest)


def _bucket(budget: ContextBudget, n: int) -> int:
    bucket = budget.prefill_bucket(n)
    assert bucket is not None
    return bucket


def _single_edges(budget: ContextBudget, upto: int) -> list[int]:
    """Lengths <= ``upto`` that fill one prefill run's shape exactly, and ``upto`` itself."""
    buckets = budget.prefill_buckets
    edges = {b for b in buckets if b <= upto}
    start = buckets[-1] + BUCKET_STEP if buckets else BUCKET_STEP
    start = max(BUCKET_STEP, (start // BUCKET_STEP) * BUCKET_STEP)
    edges.update(range(start, upto + 1, BUCKET_STEP))
    edges.add(upto)
    return sorted(edges)


def bucket_edges(budget: ContextBudget, limit: int) -> list[int]:
    """Prompt lengths up to ``limit`` after which the padded prefill grows, ascending.

    Each is the longest prompt of one padded size (a bucket edge: no padding there when the
    bucket is exact), and ``limit`` itself closes the list. Without buckets: ``[limit]``.

    Args:
        budget: the package's budget.
        limit: the longest prompt to consider (>= 1).
    """
    if limit < 1:
        raise InvalidRequestError(f"limit is {limit}; it must be at least 1")
    if not budget.prefill_buckets:
        return [limit]
    step = budget.prefill_window
    if step is None:
        return _single_edges(budget, limit)
    rests = _single_edges(budget, step)  # the last run holds 1..step tokens
    edges = set()
    full = 0
    while full * step < limit:
        for rest in rests:
            n = full * step + rest
            if n <= limit:
                edges.add(n)
        full += 1
    edges.add(limit)
    return sorted(edges)


def _prompt(
    budget: ContextBudget, base: int, selected: Sequence[int], partial: int | None, partial_tokens: int, context: int
) -> PackedPrompt:
    n = base + context
    padded = padded_length(budget, n)
    bucket = None
    if budget.prefill_buckets:
        step = budget.prefill_window
        rest = n if step is None else (n - 1) % step + 1
        bucket = _bucket(budget, rest)
    return PackedPrompt(
        selected=tuple(selected),
        partial=partial,
        partial_tokens=partial_tokens,
        context_tokens=context,
        prompt_tokens=n,
        prefill_bucket=bucket,
        padding=padded - n,
        padded_tokens=padded,
    )


def _default(budget: ContextBudget, base: int, counts: Sequence[int], count: int, limit: int) -> PackedPrompt:
    selected: list[int] = []
    total = 0
    for i in range(count):
        if base + total + counts[i] > limit:
            break
        selected.append(i)
        total += counts[i]
    return _prompt(budget, base, selected, None, 0, total)


def _fit(
    budget: ContextBudget, base: int, counts: Sequence[int], target: int, allow_partial: bool, min_partial: int
) -> PackedPrompt:
    """First-fit the ranked candidates below ``target``; cut the first misfit to land on it."""
    room = target - base
    selected: list[int] = []
    total = 0
    partial: int | None = None
    partial_tokens = 0
    for i, n in enumerate(counts):
        if total + n <= room:
            selected.append(i)
            total += n
        elif allow_partial and room - total >= min_partial:
            partial, partial_tokens = i, room - total
            total = room
            break
    return _prompt(budget, base, selected, partial, partial_tokens, total)


def pack_context(
    budget: ContextBudget,
    base_tokens: int,
    candidates: Sequence[int],
    *,
    default_count: int | None = None,
    max_new_tokens: int | None = None,
    limit: int | None = None,
    max_context_loss: float = 0.1,
    allow_partial: bool = True,
    min_partial_tokens: int = 32,
) -> PackingPlan:
    """Choose the context so the prompt ends at a prefill bucket edge (see the module docstring).

    Args:
        budget: the package's budget (buckets, prompt limit, window).
        base_tokens: tokens of the prompt without any context (template, system prompt,
            question).
        candidates: token counts of the retrieved chunks in rank order, each including the
            separator that joins it to the others (count it for every chunk: that is safe).
        default_count: how many of the top candidates default packing sends (None: all); the
            others are a reserve that filling may use.
        max_new_tokens: output tokens to keep room for (see :func:`packing_limit`).
        limit: a lower cap on the prompt than the budget's (e.g. what a framework's own
            accounting accepts).
        max_context_loss: fraction of the default's context a trim may drop to reach a
            smaller bucket (0 turns trimming off; cutting a chunk short counts as loss too).
        allow_partial: cut one chunk short to land exactly on an edge.
        min_partial_tokens: never keep less than this of a cut chunk.

    Returns:
        The default and the bucket-aware choice. ``packed.prompt_tokens`` never exceeds the
        limit, its padding and padded prefill are never larger than the default's, and its
        context is at least ``1 - max_context_loss`` of the default's.

    Raises:
        ContextWindowExceededError: the prompt without context is already over the limit.
        InvalidRequestError: negative counts or out-of-range parameters.
    """
    if base_tokens < 1:
        raise InvalidRequestError(f"base_tokens is {base_tokens}; a prompt has at least 1 token")
    if any(c < 0 for c in candidates):
        raise InvalidRequestError(f"candidate token counts must be >= 0, got {list(candidates)}")
    if not 0.0 <= max_context_loss <= 1.0:
        raise InvalidRequestError(f"max_context_loss is {max_context_loss}; use a fraction between 0 and 1")
    if min_partial_tokens < 1:
        raise InvalidRequestError(f"min_partial_tokens is {min_partial_tokens}; it must be at least 1")
    if default_count is not None and default_count < 0:
        raise InvalidRequestError(f"default_count is {default_count}; it must be >= 0 (or None for all)")
    cap = packing_limit(budget, max_new_tokens)
    if limit is not None:
        if limit < 1:
            raise InvalidRequestError(f"limit is {limit}; it must be at least 1")
        cap = min(cap, limit)
    if base_tokens > cap:
        raise ContextWindowExceededError(
            f"the prompt without any retrieved context already takes {base_tokens} tokens, over the "
            f"{cap} tokens this package allows (prompt limit {budget.max_prompt_tokens}, window "
            f"{budget.window}); shorten the question, the system prompt or the prompt template",
            prompt_tokens=base_tokens,
            limit=cap,
            window=budget.window,
        )
    count = len(candidates) if default_count is None else min(default_count, len(candidates))
    default = _default(budget, base_tokens, candidates, count, cap)
    if not budget.prefill_buckets:
        return PackingPlan(default, default, "default", cap, cap)

    edges = [e for e in bucket_edges(budget, cap) if e >= base_tokens]
    up = next(e for e in edges if e >= default.prompt_tokens)
    floor = (1.0 - max_context_loss) * default.context_tokens
    best, best_target = default, up
    for target in edges:
        if target > up:
            break
        option = _fit(budget, base_tokens, candidates, target, allow_partial, min_partial_tokens)
        if (
            option.padding > default.padding
            or option.padded_tokens > default.padded_tokens
            or option.context_tokens < floor
        ):
            continue
        key = (option.padded_tokens, -option.context_tokens, option.padding)
        if key < (best.padded_tokens, -best.context_tokens, best.padding):
            best, best_target = option, target
    if best == default:
        strategy: Strategy = "default"
    elif best.padded_tokens < default.padded_tokens:
        strategy = "trim"
    else:
        strategy = "fill"
    return PackingPlan(default, best, strategy, cap, best_target)
