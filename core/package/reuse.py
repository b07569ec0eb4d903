"""Whether a package's KV cache may be reused between calls: a policy from the package's facts.

A session keeps the generator of its last call and rewinds it to the prefix a new prompt
shares (:mod:`ryzenai_core.generation.kv_cache` does that). Whether it may, and by default,
follows from the package alone: its ``model.type`` (some generators cannot rewind), whether it
runs on Ryzen AI (whether that execution provider rewinds is unknown) and its declared sliding
window (which evicts KV). ``ryzenai-llm info`` shows the policy; the session takes its default.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ALIGN", "NO_REWIND_TYPES", "kv_reuse_default", "kv_reuse_policy"]


class _ReuseFacts(Protocol):
    """What the policy reads of a package (:class:`~ryzenai_core.package.folder.ModelPackage`)."""

    @property
    def model_type(self) -> str: ...
    @property
    def is_ryzenai(self) -> bool: ...
    @property
    def sliding_window(self) -> int | None: ...


#: The kept prefix and the runs of a windowed feed end at multiples of this many tokens.
ALIGN = 64
#: ``model.type`` values whose generators onnxruntime-genai cannot rewind (``rewind_to`` refuses them).
NO_REWIND_TYPES = frozenset({"decoder-pipeline", "lfm2", "phi3v", "whisper"})


def kv_reuse_default(package: _ReuseFacts) -> bool:
    """Reuse is on by default where the runtime's support is known: plain ONNX packages that can rewind."""
    return not package.is_ryzenai and package.model_type not in NO_REWIND_TYPES


def kv_reuse_policy(package: _ReuseFacts) -> dict[str, Any]:
    """What KV prefix reuse does on ``package``, for ``ryzenai-llm info``."""
    window = package.sliding_window
    if package.model_type in NO_REWIND_TYPES:
        detail = f"not available: onnxruntime-genai cannot rewind a {package.model_type!r} generator"
    elif package.is_ryzenai:
        detail = (
            "off by default (whether the Ryzen AI execution provider rewinds is unknown); with kv_reuse=True, "
            "a refused rewind falls back to a cold prefill and turns reuse off for the model"
        )
    else:
        detail = f"on by default: only prefill KV is kept, in multiples of {ALIGN} tokens, so output equals a cold run"
    if window is not None and package.model_type not in NO_REWIND_TYPES:
        detail += (
            f"; the decoder's {window}-token sliding window evicts KV, so only a call whose prompt and answer "
            f"stayed within {window} tokens is reused (longer conversations are prefilled cold)"
        )
    return {
        "default": kv_reuse_default(package),
        "available": package.model_type not in NO_REWIND_TYPES,
        "within_window": window,
        "detail": detail,
    }
