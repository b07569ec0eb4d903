"""The KV cache a session keeps between calls, and how a prompt is fed into it.

A :class:`~ryzenai_core.generation.session.Session` keeps the generator of its last call. A call whose
prompt starts with that call's prompt (multi-turn chat, agent loops, a shared system prompt)
rewinds it to the shared prefix and prefills only the rest. :func:`reusable_prefix` decides
how much is kept so that the result is exact: the logits of a cold prefill, bit for bit, as
measured with onnxruntime-genai 0.14 to 0.18 on the CPU.

* Only KV computed by prefill is kept: generated tokens went through the one-token decode
  kernel, whose results differ in the last bits, so they are prefilled again. At least two
  tokens are appended after a rewind (a one-token append runs that kernel too, and generating
  right after a rewind gives a wrong token).
* The kept prefix is a multiple of :data:`ALIGN` tokens. The CPU kernels take a prefill's rows
  in tiles of 64, and a row alone in its tile is rounded differently: a split whose appended
  part is 65, 129, ... tokens long changes the logits in the last bits (about 1 in 40 random
  prompt pairs, on every fixture family); with the prefix aligned, none did.
* A package that declares a sliding window (``decoder.sliding_window``, as onnxruntime-genai's
  model builder writes it for Gemma 3) keeps a window-sized KV cache for its local layers, which
  evicts: onnxruntime-genai 0.16+ refuses to rewind a generator that holds more than the window
  (and a little slack), and a prefill split after that point is not exact. Such a generator is
  kept only while its whole sequence (prompt and answer) is within the window.
* Images are part of the cache key, and the kept prefix must hold all of them (the runtime
  takes images only on a fresh generator).

Some model types cannot rewind at all (:data:`NO_REWIND_TYPES`), and whether a Ryzen AI
execution provider rewinds is not known here: reuse is off by default on Ryzen AI packages,
and when the runtime refuses a rewind or an append, the session warns once, goes on with a
cold generator and keeps reuse off for that model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequestError
from ..package.reuse import ALIGN, NO_REWIND_TYPES, kv_reuse_default

if TYPE_CHECKING:
    from ..package.folder import ModelPackage

__all__ = ["KVCache", "feed", "reusable_prefix"]

log = logging.getLogger("ryzenai_core")


def reusable_prefix(
    cached: Sequence[int],
    held: int,
    prompt: Sequence[int],
    *,
    last_image_token: int = -1,
    window: int | None = None,
) -> int:
    """How many tokens of a cached generator a new prompt may keep (0: none, start cold).

    Args:
        cached: the prompt ids the generator's KV was prefilled for.
        held: tokens the generator holds (that prompt and the tokens generated after it).
        prompt: the new prompt's ids.
        last_image_token: index of the new prompt's last image token (-1 without images).
        window: the decoder's declared sliding window, if any.
    """
    if window is not None and held > window:
        return 0
    common = 0
    for a, b in zip(cached, prompt, strict=False):
        if a != b:
            break
        common += 1
    keep = min(common, len(prompt) - 2)
    keep -= keep % ALIGN
    return keep if keep > 0 and keep > last_image_token else 0


def feed(generator: Any, ids: Sequence[int], start: int = 0, run: int | None = None) -> None:
    """Append ``ids[start:]`` to ``generator``, in runs of at most ``run`` tokens (None: one call).

    Every run but the last ends at a multiple of :data:`ALIGN`, so the split is exact (see the
    module docstring), and the last one holds at least two tokens.
    """
    pos, end = start, len(ids)
    while run is not None and end - pos > run:
        cut = (pos + run) // ALIGN * ALIGN
        if end - cut < 2:
            cut -= ALIGN
        if cut <= pos:  # a run shorter than ALIGN
            cut = min(pos + run, end - 2)
        generator.append_tokens(list(ids[pos:cut]))
        pos = cut
    generator.append_tokens(list(ids[pos:end]))


@dataclass
class _Cached:
    generator: Any
    sequence: list[int]
    """The prompt ids whose KV the generator's prefill computed."""
    held: int
    """Tokens the generator holds: that prompt and what was generated after it."""
    signature: str
    max_length: int
    images: str = ""


class KVCache:
    """The one generator a session keeps, and whether this model may reuse it (see the module docstring)."""

    def __init__(self, package: ModelPackage) -> None:
        self.package = package
        self._cached: _Cached | None = None
        self.refused: str | None = None
        """The runtime's refusal of a rewind or an append, once it refused one: reuse is off since."""

    @property
    def holds(self) -> bool:
        """Whether a generator is kept."""
        return self._cached is not None

    def enabled(self, requested: bool | None, name: str = "kv_reuse") -> bool:
        """Whether a call asking for ``requested`` (None: the package's default) reuses and keeps KV.

        Raises:
            InvalidRequestError: ``kv_reuse=True`` for a model type that cannot rewind.
        """
        model_type = self.package.model_type
        if requested and model_type in NO_REWIND_TYPES:
            raise InvalidRequestError(
                f"{name}=True asks to reuse the previous call's KV cache, but onnxruntime-genai cannot rewind a "
                f"generator of model.type {model_type!r} ({self.package.name}); leave {name} unset or pass "
                f"{name}=False (every call is prefilled from the start)"
            )
        if self.refused is not None:
            return False
        return kv_reuse_default(self.package) if requested is None else requested

    def may_keep(self, prompt_tokens: int) -> bool:
        """Whether a generator for a prompt this long could be reused by a later call."""
        window = self.package.sliding_window
        return window is None or prompt_tokens < window

    def take(
        self, prompt: Sequence[int], signature: str, images: str, last_image_token: int, max_length: int
    ) -> tuple[Any, int] | None:
        """The kept generator and how many of its tokens ``prompt`` keeps, or None (it is dropped)."""
        cached, self._cached = self._cached, None
        if cached is None or cached.signature != signature or cached.images != images:
            return None
        if cached.max_length < max_length:
            return None
        keep = reusable_prefix(
            cached.sequence,
            cached.held,
            prompt,
            last_image_token=last_image_token,
            window=self.package.sliding_window,
        )
        return (cached.generator, keep) if keep else None

    def store(
        self, generator: Any, prompt: Sequence[int], generated: int, signature: str, max_length: int, images: str
    ) -> None:
        """Keep ``generator`` (its prompt's KV came from prefill) for the next call."""
        self._cached = _Cached(generator, list(prompt), len(prompt) + generated, signature, max_length, images)

    def discard(self, generator: Any) -> None:
        """Drop ``generator`` if it is the kept one."""
        if self._cached is not None and self._cached.generator is generator:
            self._cached = None

    def clear(self) -> None:
        """Drop the kept generator (frees its KV cache)."""
        self._cached = None

    def refuse(self, exc: Exception) -> None:
        """The runtime refused a rewind or an append: warn (once) and keep reuse off for this model."""
        self._cached = None
        if self.refused is None:
            self.refused = str(exc)
            log.warning(
                "%s: the runtime refused to continue a kept generator (%s); this call and every later one on the "
                "model are prefilled from the start (KV prefix reuse is off for it). Pass kv_reuse=False to skip "
                "the attempt.",
                self.package.name,
                exc,
            )
