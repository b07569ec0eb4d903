"""Bucketed context accounting for Ryzen AI model packages.

The NPU runs precompiled fixed shapes. A prompt is padded up to the smallest prefill
bucket that holds it (past the largest bucket: up to a multiple of 256), and each decode
step runs the smallest token bucket that holds the attention-mask (history) length.
Prompt + output must fit the window; the prompt alone must fit the prompt limit of the
Ryzen AI release that runs the package.

:class:`ContextBudget` holds those numbers for one package; :meth:`ContextBudget.plan`
turns a prompt length and a wanted output length into a :class:`BudgetPlan`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ContextWindowExceededError, InvalidRequestError

__all__ = [
    "DEFAULT_DECODE_BUCKETS",
    "DEFAULT_PREFILL_BUCKETS",
    "BUCKET_STEP",
    "BudgetPlan",
    "ContextBudget",
]

#: AMD's generator defaults when an NPU package lists no prefill bucket files.
DEFAULT_PREFILL_BUCKETS: tuple[int, ...] = (128, 256, 512, 768, 1024, 1536, 1792, 2048, 2304, 3072, 4096)
#: AMD's generator defaults when an NPU package lists no decode (token) bucket files.
DEFAULT_DECODE_BUCKETS: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
#: Past the largest bucket, shapes are padded up to a multiple of this.
BUCKET_STEP = 256


def _round_up(n: int, step: int) -> int:
    return max(step, math.ceil(n / step) * step)


def _bucket_for(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= n; past the largest, n rounded up to a multiple of 256."""
    i = bisect.bisect_left(buckets, n)
    if i < len(buckets):
        return buckets[i]
    return _round_up(n, BUCKET_STEP)


@dataclass(frozen=True)
class BudgetPlan:
    """What one generation will cost on the package's fixed shapes.

    Attributes:
        prompt_tokens: tokens in the rendered prompt.
        prefill_bucket: the padded length of the (last) prefill run, or None for packages
            without buckets (plain ONNX).
        padding: pad tokens added over all prefill runs.
        prefill_windows: prefill runs needed (> 1 when the package prefills long prompts in
            windows of ``prefill_window`` tokens).
        max_new_tokens: output tokens granted: the request, clamped to what is left.
        requested_new_tokens: output tokens asked for (None: as many as fit).
        clamped: True when the request was cut to fit the window.
        decode_buckets: token buckets the history passes through while decoding.
        window: prompt + output tokens the package can hold.
        prompt_limit: the largest prompt the package accepts.
        prefill_bucket_estimated: the prefill bucket is AMD's generator default, not one of the
            package's files (Token Fusion packages have none): an estimate of the cost.
        decode_past_buckets: history tokens the decode passes beyond the package's largest token
            bucket (no bucket is named for them).
    """

    prompt_tokens: int
    prefill_bucket: int | None
    padding: int
    prefill_windows: int
    max_new_tokens: int
    requested_new_tokens: int | None
    clamped: bool
    decode_buckets: list[int] = field(default_factory=list)
    window: int = 0
    prompt_limit: int = 0
    prefill_bucket_estimated: bool = False
    decode_past_buckets: int = 0

    @property
    def max_length(self) -> int:
        """OGA's ``max_length`` for this plan: prompt + granted output."""
        return self.prompt_tokens + self.max_new_tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (every field is a number, a flag or a list of numbers)."""
        d = dict(self.__dict__)
        d["decode_buckets"] = list(self.decode_buckets)
        return d


@dataclass(frozen=True)
class ContextBudget:
    """The length limits of one model package on one Ryzen AI release.

    Attributes:
        window: prompt + output tokens the package can hold (min of ``context_length``,
            ``search.max_length`` and ``max_length_for_kv_cache``).
        prompt_limit: the largest prompt accepted (the release's ``max_prompt_length`` from
            rai_config.json, never more than the window). A prompt must also leave room for
            at least one output token.
        prefill_window: longest single prefill run (``hybrid_opt_max_seq_length``), or None.
        prefill_buckets: padded prefill lengths, ascending; empty for plain packages.
        decode_buckets: padded history lengths for decode steps, ascending; may be empty.
        default_max_new_tokens: output budget when a call sets none.
        prompt_limit_source: where ``prompt_limit`` came from, for reports.
        feed_window: prompt tokens the engine hands the runtime per call, or None for the
            whole prompt at once. Set where the runtime would otherwise run a prompt longer
            than ``prefill_window`` in one prefill (see ``ModelPackage.budget``).
        image_prompt_limit: the longest prompt with images, or None for ``prompt_limit``: the
            runtime takes images only with the whole prompt, so one fed in windows cannot
            hold them past the first window.
        long_prompts: how a prompt longer than ``prefill_window`` reaches the runtime:
            ``one run``, ``runtime chunks``, ``windows`` (``feed_window``) or ``capped``
            (``prompt_limit`` is one run).
        prefill_buckets_estimated: ``prefill_buckets`` are AMD's generator defaults standing in
            for bucket files the package does not have.
    """

    window: int
    prompt_limit: int
    prefill_window: int | None = None
    prefill_buckets: tuple[int, ...] = ()
    decode_buckets: tuple[int, ...] = ()
    default_max_new_tokens: int | None = None
    prompt_limit_source: str = "window"
    feed_window: int | None = None
    image_prompt_limit: int | None = None
    long_prompts: str = "one run"
    prefill_buckets_estimated: bool = False

    def __post_init__(self) -> None:
        if self.window < 2:
            raise InvalidRequestError(f"context window {self.window} is too small: it must be at least 2 tokens")
        if not 1 <= self.prompt_limit <= self.window:
            raise InvalidRequestError(
                f"prompt limit {self.prompt_limit} must be between 1 and the window ({self.window})"
            )
        for name in ("prefill_buckets", "decode_buckets"):
            values = getattr(self, name)
            if list(values) != sorted(set(values)) or any(v <= 0 for v in values):
                raise InvalidRequestError(f"{name} must be positive and strictly ascending, got {list(values)}")

    @property
    def bounded_output_tokens(self) -> int:
        """The output budget of a call that needs a finite one (constrained output, framework metadata).

        The package's ``default_max_new_tokens``, else what the window leaves after the prompt
        limit (at least 256); never more than the window minus one prompt token.
        """
        if self.default_max_new_tokens is not None:
            return min(self.default_max_new_tokens, self.window - 1)
        return min(max(self.window - self.prompt_limit, 256), self.window - 1)

    def output_tokens(self, max_new_tokens: int | None = None) -> int:
        """The output a call asking for ``max_new_tokens`` can get at most (None: the bounded default).

        Never more than the window minus the one prompt token every generation needs.
        """
        return min(max_new_tokens or self.bounded_output_tokens, self.window - 1)

    def prefill_bucket(self, prompt_tokens: int) -> int | None:
        """Padded length of a single prefill of this many tokens (None without buckets)."""
        if not self.prefill_buckets:
            return None
        return _bucket_for(prompt_tokens, self.prefill_buckets)

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt that can still produce one token."""
        return min(self.prompt_limit, self.window - 1)

    def check_prompt(self, prompt_tokens: int, *, images: bool = False) -> None:
        """Raise :class:`ContextWindowExceededError` if the prompt (``images``: with images) is over the limit."""
        if images and self.image_prompt_limit is not None and prompt_tokens > self.image_prompt_limit:
            raise ContextWindowExceededError(
                f"prompt of {prompt_tokens} tokens with images is over this package's limit of "
                f"{self.image_prompt_limit} tokens for prompts with images by "
                f"{prompt_tokens - self.image_prompt_limit}: the runtime prefills a prompt with images in one "
                f"run, and the package's runs hold at most {self.image_prompt_limit} tokens (text prompts are "
                f"fed in windows, up to {self.prompt_limit}). Send fewer images or less text with them, or drop "
                "old turns (overflow policy 'drop_oldest').",
                prompt_tokens=prompt_tokens,
                limit=self.image_prompt_limit,
                window=self.window,
            )
        if prompt_tokens >= self.window and prompt_tokens <= self.prompt_limit:
            raise ContextWindowExceededError(
                f"prompt of {prompt_tokens} tokens fills the whole window of {self.window} tokens and "
                f"leaves no room for output; the longest usable prompt is {self.window - 1} tokens. "
                "Shorten the prompt (fewer retrieved chunks, fewer old turns).",
                prompt_tokens=prompt_tokens,
                limit=self.window - 1,
                window=self.window,
            )
        if prompt_tokens > self.prompt_limit:
            over = prompt_tokens - self.prompt_limit
            raise ContextWindowExceededError(
                f"prompt of {prompt_tokens} tokens is over this package's prompt limit of "
                f"{self.prompt_limit} tokens ({self.limit_reason}) "
                f"by {over}. Shorten the prompt: retrieve fewer or smaller chunks, drop old "
                f"turns (overflow policy 'drop_oldest'), or use a package with a larger window.",
                prompt_tokens=prompt_tokens,
                limit=self.prompt_limit,
                window=self.window,
            )

    @property
    def limit_reason(self) -> str:
        """Where :attr:`prompt_limit` comes from, in words (``its window of 4096 tokens less ...``)."""
        if self.prompt_limit_source == "window":
            return f"its window of {self.window} tokens less the one token an answer needs"
        return f"{self.prompt_limit_source}; window {self.window}"

    def plan(self, prompt_tokens: int, max_new_tokens: int | None = None, *, images: bool = False) -> BudgetPlan:
        """Plan one generation.

        Args:
            prompt_tokens: tokens in the rendered prompt (>= 1).
            max_new_tokens: output tokens wanted; None means as many as fit (or the
                package default). A request larger than what is left is clamped and the
                plan says so; it never fails later inside the runtime.
            images: the prompt holds images (see ``image_prompt_limit``).

        Raises:
            ContextWindowExceededError: the prompt is over the prompt limit.
            InvalidRequestError: a non-positive count.
        """
        if prompt_tokens < 1:
            raise InvalidRequestError(
                f"prompt_tokens is {prompt_tokens}: a generation needs a prompt of at least 1 token"
            )
        if max_new_tokens is not None and max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens is {max_new_tokens}: it must be at least 1 (or None)")
        self.check_prompt(prompt_tokens, images=images)

        left = self.window - prompt_tokens
        wanted = max_new_tokens if max_new_tokens is not None else (self.default_max_new_tokens or left)
        granted = min(wanted, left)
        clamped = max_new_tokens is not None and granted < max_new_tokens

        if self.prefill_buckets:
            step = self.prefill_window or prompt_tokens
            full, rest = divmod(prompt_tokens, step)
            if rest == 0:
                full, rest = full - 1, step
            windows = full + 1
            bucket = _bucket_for(rest, self.prefill_buckets)
            padding = bucket - rest + full * (_bucket_for(step, self.prefill_buckets) - step)
            prefill_bucket: int | None = bucket
        else:
            windows = math.ceil(prompt_tokens / self.prefill_window) if self.prefill_window else 1
            prefill_bucket, padding = None, 0

        decode: list[int] = []
        past = 0
        if self.decode_buckets:
            # Only the package's own token buckets: history past the largest has none.
            first = _bucket_for(prompt_tokens + 1, self.decode_buckets)
            last = _bucket_for(prompt_tokens + granted, self.decode_buckets)
            decode = [b for b in self.decode_buckets if first <= b <= last]
            past = max(0, prompt_tokens + granted - self.decode_buckets[-1])

        return BudgetPlan(
            prompt_tokens=prompt_tokens,
            prefill_bucket=prefill_bucket,
            padding=padding,
            prefill_windows=windows,
            max_new_tokens=granted,
            requested_new_tokens=max_new_tokens,
            clamped=clamped,
            decode_buckets=decode,
            window=self.window,
            prompt_limit=self.prompt_limit,
            prefill_bucket_estimated=self.prefill_buckets_estimated and prefill_bucket is not None,
            decode_past_buckets=past,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        d = asdict(self)
        d["prefill_buckets"] = list(self.prefill_buckets)
        d["decode_buckets"] = list(self.decode_buckets)
        return d
