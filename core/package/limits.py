"""A package's length limits, read from its configs: a :class:`~.folder.ModelPackage`'s :class:`~.budget.ContextBudget`.

- **The window** is what the package's ``genai_config.json`` allows: ``search.max_length``
  (never more than ``model.context_length`` or ``max_length_for_kv_cache``). Nothing is read from
  the package's name (AMD's Ryzen AI 1.9 names carry no ``_4K``/``_16K``).
- **The prompt limit** is one number, everywhere: the release's ``max_prompt_length``
  (rai_config.json), never more than the window less the one token an answer needs.
- **Prompts longer than one prefill run** (``hybrid_opt_max_seq_length``) go to the runtime in
  several runs only when the package declares chunked context (``hybrid_opt_chunk_context``, as
  AMD's long-context configs do) or the user opts in with ``RYZENAI_LLM_SPLIT_PREFILL=1``
  (unverified on the NPU: the Gemma-3-4b 16K package declares neither); otherwise the prompt
  limit is one run, and a longer prompt is refused with a message naming the limit and the setting.
- **Buckets** are the package's files; where it has none for a phase, AMD's generator defaults
  stand in and are marked as estimates.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .budget import DEFAULT_DECODE_BUCKETS, DEFAULT_PREFILL_BUCKETS, ContextBudget
from .runtime import ENV_RELEASE
from .scan import config_int, prompt_limit_key

if TYPE_CHECKING:
    from .folder import ModelPackage

__all__ = ["ENV_SPLIT_PREFILL", "chunked_context", "long_prompt_policy", "package_budget", "split_prefill_opted_in"]

#: Environment variable that feeds prompts longer than one prefill run in several runs on a
#: package that does not declare chunked context (unverified on the NPU).
ENV_SPLIT_PREFILL = "RYZENAI_LLM_SPLIT_PREFILL"

_TRUE = ("1", "true", "yes", "on")


def split_prefill_opted_in() -> bool:
    """Whether ``RYZENAI_LLM_SPLIT_PREFILL`` asks for several prefill runs where the package declares none."""
    return os.environ.get(ENV_SPLIT_PREFILL, "").strip().lower() in _TRUE


def chunked_context(package: ModelPackage) -> bool:
    """Whether the package declares chunked context (``hybrid_opt_chunk_context``): prefills on top of earlier runs."""
    return str(package.provider_options.get("hybrid_opt_chunk_context", "")).strip().lower() in _TRUE


def package_budget(package: ModelPackage) -> ContextBudget:
    """The budget of ``package`` for its release (see the module docstring).

    Raises:
        ConfigError: the configs set no length, or a length that is not a positive number.
    """
    cfg_path = package.path / "genai_config.json"
    model = package.config["model"]
    candidates: list[int] = []
    if "context_length" in model:
        candidates.append(config_int(model["context_length"], "model.context_length", cfg_path))
    if "max_length" in package.search:
        candidates.append(config_int(package.search["max_length"], "search.max_length", cfg_path))
    kv = package.provider_options.get("max_length_for_kv_cache")
    if kv is not None:
        candidates.append(config_int(kv, "max_length_for_kv_cache", cfg_path))
    if not candidates:
        raise ConfigError(f"{cfg_path} sets neither model.context_length nor search.max_length; add one", path=cfg_path)
    window = min(candidates)
    seq = package.provider_options.get("hybrid_opt_max_seq_length")
    prefill_window = config_int(seq, "hybrid_opt_max_seq_length", cfg_path) if seq is not None else None

    limit, source = window, "window"
    limits = package.rai_prompt_limits
    if limits:
        key = prompt_limit_key(limits, package.release)
        limit = min(limits[key], window)
        source = (
            f"rai_config.json max_prompt_length[{key!r}] for release {package.release}"
            if package.release
            else f"rai_config.json max_prompt_length[{key!r}], the smallest entry, since the "
            f"Ryzen AI release is unknown (set {ENV_RELEASE} to choose)"
        )
    if limit >= window:  # the prompt must leave room for one token of the answer
        limit = window - 1
        source = "window" if source == "window" else f"{source}, less the one token an answer needs"

    feed = image_limit = None
    long_prompts = "one run"
    if prefill_window is not None and prefill_window < limit:
        if not (chunked_context(package) or split_prefill_opted_in()):
            limit, long_prompts = prefill_window, "capped"
            source = (
                f"hybrid_opt_max_seq_length {prefill_window}: one prefill run, since the package declares no "
                "hybrid_opt_chunk_context and a prefill run on top of earlier ones is unverified on the NPU; "
                f"{ENV_SPLIT_PREFILL}=1 feeds longer prompts in runs anyway (up to the window, {window - 1})"
            )
        elif package.runtime_chunks_prefill:
            long_prompts = "runtime chunks"
        elif package.sliding_window is not None:
            # Fed in windows, the prefill would be split past the declared sliding window,
            # which is not exact (the window-sized KV cache has evicted what a one-run
            # prefill still attends to): such a package takes one run's prompt.
            limit, long_prompts = prefill_window, "capped"
            source = (
                f"hybrid_opt_max_seq_length {prefill_window}: one prefill run, since the decoder's "
                f"{package.sliding_window}-token sliding window makes a prefill split into runs inexact"
            )
        else:
            feed = image_limit = prefill_window
            long_prompts = "windows"

    prefill: tuple[int, ...] = package.prefill_buckets_found
    decode: tuple[int, ...] = package.decode_buckets_found
    estimated = False
    if package.mode.value in ("full-fusion", "token-fusion", "npu"):
        cap = prefill_window or window
        if not prefill:
            prefill = tuple(b for b in DEFAULT_PREFILL_BUCKETS if b <= cap) or (cap,)
            estimated = True
        if not decode:
            decode = tuple(b for b in DEFAULT_DECODE_BUCKETS if b <= window) or (window,)
    elif package.mode.value == "hybrid" and prefill:
        decode = ()
    return ContextBudget(
        window=window,
        prompt_limit=limit,
        prefill_window=prefill_window,
        prefill_buckets=prefill,
        decode_buckets=decode,
        prompt_limit_source=source,
        feed_window=feed,
        image_prompt_limit=image_limit,
        long_prompts=long_prompts,
        prefill_buckets_estimated=estimated,
    )


def long_prompt_policy(package: ModelPackage) -> dict[str, Any]:
    """How a prompt longer than one prefill run reaches the runtime (``ryzenai-llm info``).

    ``policy`` is ``one run`` (no run length, or runs as long as the prompt limit),
    ``runtime chunks`` (the runtime splits it, ``search.chunk_size``), ``windows`` (the
    engine feeds text prompts in runs of at most ``run_length`` tokens and limits prompts
    with images to one run) or ``capped`` (the prompt limit is one run).
    """
    b = package.budget
    run = b.prefill_window
    unverified = (
        f" ({ENV_SPLIT_PREFILL}=1: unverified on the NPU, as the package declares no hybrid_opt_chunk_context)"
        if not chunked_context(package) and b.long_prompts in ("windows", "runtime chunks")
        else ""
    )
    details = {
        "one run": "the whole prompt is prefilled in one run",
        "runtime chunks": f"the runtime prefills in chunks of {package.search.get('chunk_size')} tokens{unverified}",
        "windows": (
            f"text prompts are fed in runs of at most {run} tokens (hybrid_opt_max_seq_length; the runtime "
            f"does not split {package.model_type!r} prompts itself){unverified}; a prompt with images is one run, so "
            f"at most {b.image_prompt_limit} tokens"
        ),
        "capped": f"prompts are limited to one prefill run of {run} tokens ({b.prompt_limit_source})",
    }
    policy, detail = b.long_prompts, details[b.long_prompts]
    return {"policy": policy, "run_length": run, "detail": detail, "split_prefill_opt_in": bool(unverified)}
