"""The package's tokenizer as LlamaIndex counts with it, and the token ratio when it counts with another."""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import llama_index.core
from llama_index.core import Settings

from ._calibration import SEGMENTS

if TYPE_CHECKING:
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.generation.loader import SessionKey
    from ryzenai_core.options import Execution

__all__ = [
    "RATIOS",
    "RATIOS_LOCK",
    "PackageTokenizer",
    "is_default_tokenizer",
    "measure_ratio",
    "reopened_tokenizer",
    "tokenizer_owner",
]

#: Safety factor over the measured tokenizer ratio (text unlike every calibration segment).
RATIO_MARGIN = 1.1


class _Counts(Protocol):
    """What counts a tokenizer's tokens: an :class:`Engine` or the core's tokenizer-only ``Tokens``."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class PackageTokenizer:
    """A model package's own tokenizer, callable the way LlamaIndex expects.

    Assign it to ``Settings.tokenizer`` (``Settings.tokenizer = llm.tokenizer``) and every count
    LlamaIndex makes (PromptHelper, text splitters, memory) is in the package's tokens, so
    :meth:`RyzenAILLM.metadata` can report the full prompt limit. Counts come from the model's
    tokenizer (in the worker process with ``execution="process"``); texts of up to 4096
    characters are cached (LRU), since text splitters count the same words again and again.

    It pickles, so LlamaIndex's spawned workers (``IngestionPipeline(num_workers=2)``) count as
    this process does: the copy reopens the package's tokenizer on its first count, from the
    tokenizer files alone where the runtime can (onnxruntime-genai 0.18), otherwise by loading the
    model as this process did (0.14, Ryzen AI 1.8's). The copy of ``Settings.tokenizer`` becomes
    ``Settings.tokenizer`` of a process that has not set one, since LlamaIndex's text splitters
    take their tokenizer from there when they are unpickled.
    """

    _CACHE_MAX_CHARS = 4096

    def __init__(self, engine: Engine, cache_size: int = 8192) -> None:
        self._setup(engine, (engine.key, engine.execution), cache_size)

    def _setup(self, counts: _Counts | None, opened: tuple[SessionKey, Execution], cache_size: int) -> None:
        self._counts = counts
        self._opened = opened
        self.path = Path(opened[0].path)
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def _unpickled(cls, opened: tuple[SessionKey, Execution], cache_size: int) -> PackageTokenizer:
        """A copy that opens its counter on first use (see :func:`reopened_tokenizer`)."""
        tokenizer = cls.__new__(cls)
        tokenizer._setup(None, opened, cache_size)
        return tokenizer

    def _counter(self) -> _Counts:
        """What counts the tokens: the engine, or (in a copy) the package reopened on first use."""
        counts = self._counts
        if counts is None:
            with self._lock:
                if self._counts is None:
                    self._counts = _reopen(*self._opened)
                counts = self._counts
        return counts

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return list(hit)
        ids = tuple(self._counter().encode(text)) if text else ()
        if len(text) <= self._CACHE_MAX_CHARS:
            with self._lock:
                self._cache[text] = ids
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return self._counter().decode(ids) if ids else ""

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` (what LlamaIndex calls)."""
        return self.encode(text)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what opened it (folder, provider, ... and execution) and whether it is ``Settings.tokenizer``."""
        installed = tokenizer_owner(llama_index.core.global_tokenizer) is self
        return (reopened_tokenizer, (*self._opened, self._cache_size, installed))

    def __repr__(self) -> str:
        return f"PackageTokenizer({str(self.path)!r})"


#: The tokenizers unpickled in this process, by what opened them: one per package and settings.
_REOPENED: dict[tuple[SessionKey, Execution], PackageTokenizer] = {}
_REOPENED_LOCK = threading.Lock()


def reopened_tokenizer(key: SessionKey, execution: Execution, cache_size: int, installed: bool) -> PackageTokenizer:
    """A pickled :class:`PackageTokenizer` in this process (nothing is loaded before its first count).

    ``installed``: it was ``Settings.tokenizer`` where it was pickled; it becomes this process's
    ``Settings.tokenizer`` unless the process chose one.
    """
    with _REOPENED_LOCK:
        tokenizer = _REOPENED.get((key, execution))
        if tokenizer is None:
            tokenizer = _REOPENED[(key, execution)] = PackageTokenizer._unpickled((key, execution), cache_size)
    if installed:
        with RATIOS_LOCK:
            if is_default_tokenizer(llama_index.core.global_tokenizer):
                Settings.tokenizer = tokenizer
    return tokenizer


def _reopen(key: SessionKey, execution: Execution) -> _Counts:
    """The counter of a pickled tokenizer: this process's engine for it, the tokenizer alone, or a new engine."""
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.engine.registry import Slot
    from ryzenai_core.generation.tokens import tokens_without_model
    from ryzenai_core.package.folder import ModelPackage

    counts: _Counts | None = Engine.registry.engines(Engine).get(Slot(key, execution))
    if counts is None:
        counts = tokens_without_model(ModelPackage.open(key.path, release=key.release))
    if counts is not None:
        return counts
    options = json.loads(key.session_options)
    counts = Engine.get(
        key.path,
        provider=key.provider,
        num_threads=key.num_threads,
        release=key.release,
        execution=execution,
        session_options=options or None,
    )
    return counts


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
