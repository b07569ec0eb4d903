"""Short runs that show what a loaded runtime really does, where its API cannot say.

- :func:`guidance_applies`: a build without guidance still has ``set_guidance`` (it logs a line
  and ignores the constraint), so whether constrained decoding works is seen only by asking
  for a string the model would never write by itself and reading what it wrote;
- :func:`decode_probe`: a greedy decode that reports, step by step, whether the logits are
  finite (NaN logits a few steps into decoding have been reported on NPU packages), and times
  it as AMD's benchmark does (a set number of tokens, end-of-sequence held off), for
  ``ryzenai-llm doctor``.

Each builds its own generator on the loaded model; the caller holds the model (one generation
at a time).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .kv_cache import feed

__all__ = ["GUIDANCE_PROBE", "decode_probe", "guidance_applies"]

#: The regex the guidance probe asks for: a string no model writes after "Answer:" by itself.
GUIDANCE_PROBE = "QQQ"


def _max_length(wanted: int, sliding_window: int | None, window: int) -> int:
    """A generator's max_length: the runtime refuses one below a sliding window baked into the graph."""
    return min(window, max(wanted, sliding_window or 0))


def guidance_applies(og: Any, model: Any, tokenizer: Any, *, sliding_window: int | None, window: int) -> bool | None:
    """Whether the runtime applies guidance: True, False (it ignored it), None (the probe could not run).

    A generation after ``Answer:`` constrained to the regex :data:`GUIDANCE_PROBE` writes it when
    guidance works; a build that ignores guidance writes what the model writes.
    """
    if not hasattr(og.GeneratorParams, "set_guidance"):
        return False
    try:
        ids = [int(i) for i in tokenizer.encode("Answer:")]
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=_max_length(len(ids) + 4, sliding_window, window), do_sample=False)
        params.set_guidance("regex", GUIDANCE_PROBE)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        out: list[int] = []
        while not generator.is_done() and len(out) < 4:
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        del generator
        text = str(tokenizer.decode(out)).strip()
    except Exception:  # noqa: BLE001 - whatever the runtime raises, the probe says nothing
        return None
    return text.startswith(GUIDANCE_PROBE[0])


def decode_probe(
    og: Any,
    model: Any,
    prompt_ids: Sequence[int],
    steps: int,
    *,
    run: int | None,
    sliding_window: int | None,
    window: int,
    watch: bool = True,
    exact: bool = False,
) -> dict[str, Any]:
    """Greedy decode up to ``steps`` tokens after ``prompt_ids`` (fed in runs of ``run``), timed.

    ``watch`` reads each step's logits (``{"finite", "nan", "inf"}``; none when the runtime does not
    expose them); ``exact`` keeps the end-of-sequence token away until ``steps`` tokens are made
    (the search option ``min_length``, as AMD's benchmark does), so every run decodes as many.

    Returns ``{"tokens", "logits", "prefill_seconds", "first_token_seconds", "decode_tokens_per_second"}``.
    """
    import numpy as np

    length = len(prompt_ids) + steps
    search: dict[str, Any] = {"max_length": _max_length(length, sliding_window, window), "do_sample": False}
    if exact:
        search["min_length"] = min(length, window)
    params = og.GeneratorParams(model)
    params.set_search_options(**search)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    feed(generator, list(prompt_ids), 0, run)
    fed = time.perf_counter()
    readable = watch and hasattr(generator, "get_logits")
    tokens: list[int] = []
    logits: list[dict[str, Any]] = []
    first = None
    while len(tokens) < steps and not generator.is_done():
        if readable:
            row = np.asarray(generator.get_logits(), dtype=np.float32).reshape(-1)
            nan, inf = int(np.isnan(row).sum()), int(np.isinf(row).sum())
            logits.append({"finite": nan == 0 and inf == 0, "nan": nan, "inf": inf})
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    del generator
    rate = (len(tokens) - 1) / (end - first) if first is not None and len(tokens) > 1 and end > first else None
    return {
        "tokens": tokens,
        "logits": logits,
        "prefill_seconds": fed - start,
        "first_token_seconds": None if first is None else first - start,
        "decode_tokens_per_second": rate,
    }
