"""What the framework faces take to choose and run an encoder: pydantic mixins.

:class:`EncoderSettings` declares the fields every encoder face has (model, provider, shapes,
buckets, execution, limits on open sessions) and opens the shared engine at construction, so a
bad folder is an error there; :class:`EmbeddingSettings` adds the embedding model's own
(pooling, normalisation, query instruction, overflow policy). The reranker's settings
(:class:`~ryzenai_core.rerank.engine.RerankSettings`) derive from :class:`EncoderSettings` too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from ..faces import Provider
from ..options import execution_setting
from .embedding import EmbeddingEngine, EmbeddingResult, Kind
from .engine import DEFAULT_CPU_MAX_TOKENS, DEFAULT_IDLE_TIMEOUT, EncoderEngine

__all__ = ["EmbeddingSettings", "EncoderSettings"]


class EncoderSettings(BaseModel):
    """What the framework faces take to choose and run an encoder (a pydantic mixin).

    Subclasses (:class:`EmbeddingSettings`, the reranker's) add their own fields and name
    their engine class; the faces declare these fields once by inheriting them.
    """

    engine_class: ClassVar[type[EncoderEngine[Any]]]

    model: str = Field(description="model folder, or Hugging Face repository id")
    provider: Provider = "auto"
    """``auto`` (or None): onnxruntime's VitisAI provider where installed, else the CPU; ``npu``, ``cpu``,
    ``cuda``, ``dml``: that device (the names every model takes, LLMs too)."""
    shapes: Literal["auto", "static", "dynamic"] = "auto"
    """``auto``: static length buckets on the NPU (or for a static graph), dynamic shapes on the CPU."""
    buckets: list[int] | None = None
    """Sequence-length buckets for static shapes (default: the engine's, capped at the maximum length)."""
    provider_options: dict[str, str] | None = None
    """VitisAI provider options over the defaults: ``config_file`` (default: AMD's compile configuration,
    shipped with the package), ``cache_dir`` (default: the per-user cache), ``cache_key`` ..."""
    execution: Literal["process", "inline"] | None = None
    """``process``: each session in a worker process (the NPU default); ``inline``: in this process."""
    onnx_file: str | None = None
    """The ONNX file in the folder when it ships several (``onnx/model_O4.onnx``)."""
    max_shapes: int | None = Field(default=None, ge=1)
    """Static shapes kept open at once, a session (on the NPU a worker) each; default: one per bucket."""
    idle_timeout: float | None = Field(default=DEFAULT_IDLE_TIMEOUT, gt=0)
    """Seconds after which an unused shape's session is closed (None: kept until the program ends)."""
    cpu_max_tokens: int = Field(default=DEFAULT_CPU_MAX_TOKENS, ge=0)
    """On the NPU, inputs of at most this many tokens run on a CPU session (faster there, nothing to compile);
    0 sends every input to the NPU."""

    renamed_settings: ClassVar[dict[str, str]] = {"isolation": "execution"}
    """Former names of settings, still taken with a DeprecationWarning (``isolation="thread"`` is ``"inline"``)."""

    _engine: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and "isolation" in data:
            data = dict(data)
            data["execution"] = execution_setting(data.get("execution"), data.pop("isolation"), cls.__name__)
        return data

    def model_post_init(self, context: Any, /) -> None:
        """Open (or share) the engine now, so a bad folder is an error at construction."""
        self._engine = self.open_engine()

    def engine_settings(self) -> dict[str, Any]:
        """The engine's settings among these fields (what :meth:`EncoderEngine.get` takes)."""
        return {
            "provider": self.provider,
            "shapes": self.shapes,
            "buckets": self.buckets,
            "provider_options": self.provider_options,
            "execution": self.execution,
            "onnx_file": self.onnx_file,
            "max_shapes": self.max_shapes,
            "idle_timeout": self.idle_timeout,
            "cpu_max_tokens": self.cpu_max_tokens,
        }

    def open_engine(self) -> Any:
        """The shared engine for these settings."""
        return self.engine_class.get(self.model, **self.engine_settings())


class EmbeddingSettings(EncoderSettings):
    """What both framework faces take to choose and run an embedding model (a pydantic mixin)."""

    engine_class = EmbeddingEngine

    model: str = Field(description="embedding model folder, or Hugging Face repository id")
    pooling: Literal["cls", "mean"] | None = None
    """Override the folder's pooling."""
    normalize: bool | None = None
    """L2-normalise the vectors (default: as the folder says; True without modules.json)."""
    query_instruction: str | None = None
    """Prefix for queries (default: the model's: BGE's for BGE English models, else none)."""
    on_overflow: Literal["truncate", "error"] = "truncate"
    """A text over the maximum length: ``truncate`` (logged, listed in the result) or ``error``."""
    dimensions: int | None = Field(default=None, ge=1)
    """Cut vectors to this many dimensions, then normalise them again (Matryoshka truncation): only for a
    model trained for it at that size (EmbeddingGemma: 768, 512, 256, 128); None keeps the full vector."""

    @property
    def engine(self) -> EmbeddingEngine:
        """The core engine (package facts: ``engine.describe()``)."""
        if self._engine is None:  # pragma: no cover - model_post_init opened it
            self._engine = self.open_engine()
        engine: EmbeddingEngine = self._engine
        return engine

    def embed_with_settings(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str | None,
        batch_size: int,
        progress: Callable[[int], None] | None = None,
    ) -> EmbeddingResult:
        """:meth:`EmbeddingEngine.embed` with these settings' normalisation and overflow policy."""
        return self.engine.embed(
            texts,
            kind=kind,
            instruction=instruction,
            normalize=self.normalize,
            batch_size=batch_size,
            on_overflow=self.on_overflow,
            progress=progress,
            dimensions=self.dimensions,
        )

    def engine_settings(self) -> dict[str, Any]:
        """The engine's settings, the pooling override among them."""
        return {**super().engine_settings(), "pooling": self.pooling}
