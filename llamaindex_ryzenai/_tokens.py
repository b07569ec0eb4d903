"""The package's tokenizer as LlamaIndex counts with it, and the token ratio when it counts with another."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._calibration import SEGMENTS

if TYPE_CHECKING:
    from ryzenai_core.engine.engine import Engine

__all__ = ["RATIOS", "RATIOS_LOCK", "PackageTokenizer", "is_default_tokenizer", "measure_ratio", "tokenizer_owner"]

#: Safety factor over the measured tokenizer ratio (text unlike every calibration segment).
RATIO_MARGIN = 1.1


class PackageTokenizer:
    """A model package's own tokenizer, callable the way LlamaIndex expects.

    Assign it to ``Settings.tokenizer`` (``Settings.tokenizer = llm.tokenizer``) and every count
    LlamaIndex makes (PromptHelper, text splitters, memory) is in the package's tokens, so
    :meth:`RyzenAILLM.metadata` can report the full prompt limit. Counts come from the model's
    tokenizer (in the worker process with ``execution="process"``); texts of up to 4096
    characters are cached (LRU), since text splitters count the same words again and again.
    """

    _CACHE_MAX_CHARS = 4096

    def __init__(self, engine: Engine, cache_size: int = 8192) -> None:
        self._engine = engine
        self.path = engine.package.path
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return list(hit)
        ids = tuple(self._engine.encode(text)) if text else ()
        if len(text) <= self._CACHE_MAX_CHARS:
            with self._lock:
                self._cache[text] = ids
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return self._engine.decode(ids) if ids else ""

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` (what LlamaIndex calls)."""
        return self.encode(text)

    def __repr__(self) -> str:
        return f"PackageTokenizer({str(self.path)!r})"


def tokenizer_owner(tokenizer: Any) -> Any:
    """The object behind a tokenizer callable (``Settings.tokenizer`` stores ``obj.encode``)."""
    return tokenizer if isinstance(tokenizer, PackageTokenizer) else getattr(tokenizer, "__self__", tokenizer)


def is_default_tokenizer(tokenizer: Any) -> bool:
    """True when nobody chose LlamaIndex's tokenizer.

    That is: unset, or the tiktoken default that ``llama_index.core.utils.get_tokenizer``
    installs on first use (cl100k_base, ``allowed_special="all"``).
    """
    if tokenizer is None:
        return True
    if not isinstance(tokenizer, functools.partial) or tokenizer.keywords != {"allowed_special": "all"}:
        return False
    encoding = getattr(tokenizer.func, "__self__", None)
    return type(encoding).__module__.startswith("tiktoken") and getattr(encoding, "name", None) == "cl100k_base"


RATIOS: dict[tuple[str, int], tuple[Any, float]] = {}
RATIOS_LOCK = threading.Lock()


def measure_ratio(package_tokenizer: Callable[[str], list[int]], other: Callable[[str], list[Any]]) -> float:
    """The largest (package tokens / other tokens) over the calibration segments.

    Args:
        package_tokenizer: counts in the package's tokens.
        other: counts in the tokenizer LlamaIndex uses (``Settings.tokenizer``).
    """
    return max(len(package_tokenizer(s)) / max(1, len(other(s))) for s in SEGMENTS)
