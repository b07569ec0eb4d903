"""The encoder engine: sessions, shapes, providers and workers an embedder and a reranker share.

:class:`EncoderEngine` runs one encoder folder with onnxruntime:

- on a Ryzen AI machine, onnxruntime's VitisAI execution provider with **static shapes**:
  texts are sorted by length and padded up to sequence-length buckets (:mod:`.batches`), each
  shape in a worker process of its own (several VitisAI sessions in one process break each
  other, and session creation can crash the process: a crash is an error for the call, the
  next call starts a new worker);
- elsewhere, the CPU provider with dynamic shapes and length-sorted batches, in this process
  (onnxruntime releases the GIL while it runs).

Each shape's session closes after ``idle_timeout`` seconds unused, and ``max_shapes`` caps how
many stay open: the LLM, the embedder and the reranker share one NPU. A dynamic graph's static
variants are written once to the cache folder. The embedding engine
(:class:`~ryzenai_core.embeddings.embedding.EmbeddingEngine`) and the reranker
(:class:`~ryzenai_core.rerank.engine.RerankEngine`) derive from it; onnxruntime and tokenizers
are imported only when a model is loaded.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NamedTuple, Protocol, TypeVar

from ..errors import InvalidRequestError, RuntimeNotAvailableError
from ..lifecycle import REGISTRY, Registry
from ..options import check_runtime_settings, execution_setting
from .batches import MAX_PADDING, Batch, BatchRun, plan_batches
from .cache import NPU_PROVIDER, EncoderCache, Placement, ShapeState, cache_root, shape_label
from .compile_progress import with_compile_progress
from .folder import import_tokenizers
from .pool import Backend, SessionPool, Shape
from .runner import LocalBackend, Opener, Pooling, SessionSpec, WorkerBackend, compile_deadline, import_onnxruntime
from .vitisai import compile_config

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self

__all__ = [
    "CPU_PROVIDER",
    "DEFAULT_CPU_MAX_TOKENS",
    "DEFAULT_EMBEDDING_BUCKETS",
    "DEFAULT_IDLE_TIMEOUT",
    "EncoderEngine",
    "EncoderSlot",
]

log = logging.getLogger("ryzenai_core")

#: Sequence-length buckets for static shapes when the folder has a dynamic model: three NPU
#: compiles (minutes each, once); shorter inputs go to the CPU (:data:`DEFAULT_CPU_MAX_TOKENS`).
DEFAULT_EMBEDDING_BUCKETS: tuple[int, ...] = (128, 256, 512)
#: On the NPU, inputs of at most this many tokens run on a CPU session: faster there (a published
#: Ryzen AI 1.8 study: the CPU wins at 1 x 32 tokens, the NPU from 1 x 128), and no shape to compile.
DEFAULT_CPU_MAX_TOKENS = 32
CPU_PROVIDER = "CPUExecutionProvider"
#: onnxruntime's execution provider for each device name of :data:`~ryzenai_core.options.PROVIDERS`,
#: and what to install where onnxruntime lacks it.
_ONNXRUNTIME_PROVIDERS: dict[str, tuple[str, str]] = {
    "npu": (NPU_PROVIDER, "run in the Ryzen AI environment (its onnxruntime-vitisai)"),
    "cuda": ("CUDAExecutionProvider", "install onnxruntime-gpu in place of onnxruntime"),
    "dml": ("DmlExecutionProvider", "install onnxruntime-directml in place of onnxruntime (Windows)"),
    "cpu": (CPU_PROVIDER, ""),
}


_SAID_CPU: set[str] = set()

#: Seconds a shape's session may stay unused before it is closed (the next call opens it again).
DEFAULT_IDLE_TIMEOUT = 300.0


class EncoderSlot(NamedTuple):
    """What decides which encoder engine a call gets (its key in the one registry)."""

    kind: type
    path: str
    package_options: tuple[tuple[str, Any], ...]
    settings: tuple[tuple[str, Any], ...]
    provider_options: tuple[tuple[str, str], ...]


class _Package(Protocol):
    """What :class:`EncoderEngine` reads of a package (:class:`EmbeddingPackage`, ``RerankPackage``)."""

    @property
    def name(self) -> str: ...
    @property
    def onnx_file(self) -> Path: ...
    @property
    def tokenizer_file(self) -> Path: ...
    @property
    def max_length(self) -> int: ...
    @property
    def static_shape(self) -> tuple[int, int] | None: ...
    @property
    def fixed_rows(self) -> int | None: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def output(self) -> str: ...
    def describe(self) -> dict[str, Any]: ...


P = TypeVar("P", bound=_Package)


class EncoderEngine(Generic[P]):
    """Runs one encoder folder on onnxruntime: what the embedding and reranking engines share.

    It chooses the provider (VitisAI where onnxruntime has it, else the CPU) and the shapes
    (static length buckets on the NPU or for a static graph, dynamic on the CPU), reads the
    tokenizer, and keeps one session per shape: in this process, or each in a worker process of
    its own. On an NPU that also holds an LLM and other encoders, sessions are a shared resource:
    each engine keeps at most one per bucket it has used (``max_shapes`` caps that: the least
    recently used idle session closes when another shape is needed), and a session unused for
    ``idle_timeout`` seconds is closed; the next call that needs it opens it again (on the NPU
    from the compile cache, without compiling again).

    On the NPU a shape's first session compiles it (minutes, once: the VitisAI compile cache
    keeps it); the opening is shown while it runs (:func:`~.compile_progress.with_compile_progress`),
    :meth:`open_shape` opens one ahead (``ryzenai-llm warmup``), :meth:`shape_state` says what is
    compiled and :meth:`placement` where a shape's session really runs (the VitisAI pass summary).

    Subclasses name their package class (:attr:`package_type`), the options :meth:`get` passes
    to it, their default buckets and cache folder. Share one engine per folder and settings with
    :meth:`get`: it keeps them in the one registry of every model (:mod:`ryzenai_core.lifecycle`),
    whose :func:`~ryzenai_core.lifecycle.close_all` closes them, LLMs too (and runs at exit). An
    engine made directly is its maker's to :meth:`close`.

    Args:
        package: the folder (or its path).
        provider: ``"auto"`` or None (VitisAI where onnxruntime has it, else CPU), ``"npu"``
            (VitisAI, an error without it), ``"cpu"``, ``"cuda"`` or ``"dml"`` (onnxruntime's
            CUDA or DirectML provider, an error without it): the names every model takes
            (:data:`~ryzenai_core.options.PROVIDERS`).
        shapes: ``"auto"`` (static on the NPU or for a static graph, else dynamic), ``"static"``
            or ``"dynamic"``.
        buckets: sequence lengths for static shapes of a dynamic graph (default
            :attr:`default_buckets`, capped at the model's maximum length). A static graph has
            one shape: its own.
        provider_options: VitisAI options over the defaults (:func:`~.vitisai.vitisai_options`:
            ``config_file``, AMD's compile configuration shipped with the package; ``cache_dir``;
            a ``cache_key`` that changes with the model file, the shape, the runtime release and
            the configuration); a user's own ``config_file`` keys the cache by its content.
        execution: ``"process"`` (a worker per session) or ``"inline"`` (this process);
            default: process on the NPU, inline on the CPU.
        isolation: the former name of ``execution`` (``"thread"`` for ``"inline"``), deprecated.
        cache_dir: where static variants of a dynamic graph go, and the VitisAI cache under
            ``vitisai`` (default: ``<cache_name>`` and ``vitisai`` in the per-user cache,
            ``~/.cache/ryzenai-llm`` on Linux, ``%LOCALAPPDATA%/ryzenai-llm/Cache`` on Windows).
        cpu_max_tokens: on the NPU, inputs of at most this many tokens run on a CPU session in
            this process (dynamic shapes) instead of a compiled shape (default
            :data:`DEFAULT_CPU_MAX_TOKENS`; 0 sends every input to the NPU); a bucket no longer
            than that is dropped. Only for a graph with dynamic axes: a static export runs its one shape.
        intra_op_threads: onnxruntime's intra-op thread count (default: its own).
        max_shapes: sessions (and workers) kept open at once; default None: one per bucket.
        idle_timeout: seconds after which an unused session is closed (default
            :data:`DEFAULT_IDLE_TIMEOUT`); None keeps sessions until :meth:`close`.

    Attributes:
        tokenizer: the folder's tokenizer, with neither padding nor truncation.
        truncating_tokenizer: the same tokenizer, cutting inputs to the maximum length as
            :attr:`truncation` says.
        max_padding: the padding bound of dynamic batches (:func:`.plan_batches`; default
            :data:`.MAX_PADDING`): a batch ends where the lengths jump. None groups texts by
            ``batch_size`` alone (benchmarks compare the two).
    """

    registry: ClassVar[Registry] = REGISTRY
    """The one registry of shared engines, LLMs' and encoders' (:mod:`ryzenai_core.lifecycle`)."""
    package_type: ClassVar[Any]
    """The package class: ``package_type.open(path, **options)``."""
    package_options: ClassVar[tuple[str, ...]] = ("onnx_file",)
    """Settings of :meth:`get` that are the package's, not the engine's."""
    default_buckets: ClassVar[tuple[int, ...]] = DEFAULT_EMBEDDING_BUCKETS
    cache_name: ClassVar[str] = "embeddings"
    truncation: ClassVar[Literal["longest_first", "only_first", "only_second"]] = "longest_first"
    """How the truncating tokenizer cuts an input over the maximum length (a pair's passage: ``only_second``)."""
    on_cpu: ClassVar[str] = "embeddings run on the CPU"
    """The start of the note (logged once per kind) that this kind of engine runs on the CPU."""
    missing_hint: ClassVar[str] = (
        "embedding model folder {model!r} does not exist; pass a folder as Hugging Face ships "
        "sentence-transformers models (onnx/model.onnx or model.onnx beside tokenizer.json), or a Hugging Face "
        "repository id like 'BAAI/bge-small-en-v1.5' (downloaded on first use)"
    )
    """What :meth:`get` says of a local folder that does not exist (``{model}``: the path as given)."""

    def __init__(
        self,
        package: P | str | os.PathLike[str],
        *,
        provider: str | None = "auto",
        shapes: Literal["auto", "static", "dynamic"] = "auto",
        buckets: Sequence[int] | None = None,
        provider_options: dict[str, str] | None = None,
        execution: Literal["process", "inline"] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        intra_op_threads: int | None = None,
        max_shapes: int | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        isolation: Literal["process", "thread"] | None = None,
        cpu_max_tokens: int = DEFAULT_CPU_MAX_TOKENS,
    ) -> None:
        execution = execution_setting(execution, isolation, type(self).__name__)
        self.package: P = package if isinstance(package, self.package_type) else self.package_type.open(package)
        self._settings: dict[str, Any] = {
            "provider": provider,
            "shapes": shapes,
            "buckets": buckets,
            "provider_options": provider_options,
            "execution": execution,
            "cache_dir": cache_dir,
            "intra_op_threads": intra_op_threads,
            "max_shapes": max_shapes,
            "idle_timeout": idle_timeout,
            "cpu_max_tokens": cpu_max_tokens,
        }
        pkg = self.package
        check_runtime_settings(provider)  # the names and the error of every model
        provider = provider or "auto"
        if shapes not in ("auto", "static", "dynamic"):
            raise InvalidRequestError(f"shapes {shapes!r} is not one of 'auto', 'static', 'dynamic'")
        if execution not in (None, "process", "inline"):
            raise InvalidRequestError(f"execution {execution!r} is not one of 'process', 'inline'")
        if max_shapes is not None and max_shapes < 1:
            raise InvalidRequestError(
                f"max_shapes is {max_shapes}; keep at least 1 session open, or pass None for one per bucket"
            )
        if idle_timeout is not None and idle_timeout <= 0:
            raise InvalidRequestError(
                f"idle_timeout is {idle_timeout}; pass a positive number of seconds, or None to keep sessions open"
            )
        if not isinstance(cpu_max_tokens, int) or cpu_max_tokens < 0:
            raise InvalidRequestError(
                f"cpu_max_tokens is {cpu_max_tokens!r}; pass a number of tokens (0 sends every input to the NPU)"
            )
        ort = import_onnxruntime()
        import_tokenizers()
        available = list(ort.get_available_providers())
        ep, install = _ONNXRUNTIME_PROVIDERS.get(provider, (CPU_PROVIDER, ""))
        if provider != "auto" and ep not in available:
            raise RuntimeNotAvailableError(
                f"provider={provider!r} needs onnxruntime's {ep}, and this onnxruntime "
                f"{ort.__version__} has {available}. To use it, {install}; or pass provider='cpu'"
            )
        on_npu = provider == "npu" or (provider == "auto" and NPU_PROVIDER in available)
        if on_npu and shapes == "dynamic":
            if provider == "npu":
                raise InvalidRequestError(
                    "shapes='dynamic' with provider='npu': the VitisAI EP compiles static shapes (AMD runs "
                    "encoders at fixed shapes; a dynamic export hung in compilation, RyzenAI-SW#312). Use "
                    "shapes='auto' for static length buckets on the NPU, or provider='cpu' for dynamic shapes"
                )
            on_npu = False
            log.warning("shapes='dynamic': %s runs on the CPU (the NPU compiles static shapes only)", pkg.name)
        if provider == "auto" and not on_npu and self.on_cpu not in _SAID_CPU:
            _SAID_CPU.add(self.on_cpu)
            log.warning(
                "%s: onnxruntime %s has no %s (providers: %s); dynamic shapes, length-sorted batches",
                self.on_cpu,
                ort.__version__,
                NPU_PROVIDER,
                ", ".join(available),
            )
        self.provider = NPU_PROVIDER if on_npu else CPU_PROVIDER if provider == "auto" else ep
        fixed = pkg.static_shape is not None or pkg.fixed_rows is not None
        if shapes == "dynamic" and fixed:
            shown = list(pkg.static_shape) if pkg.static_shape else [pkg.fixed_rows, "sequence"]
            raise InvalidRequestError(
                f"shapes='dynamic' but {pkg.onnx_file.name} has a static shape {shown}; "
                "use shapes='static' (or 'auto'), or export the model with dynamic axes"
            )
        self.static = shapes == "static" or fixed or (shapes == "auto" and on_npu)
        self.buckets: tuple[int, ...]
        if self.static and pkg.static_shape is not None:
            self.static_rows, self.buckets = pkg.static_shape[0], (pkg.static_shape[1],)
        elif self.static:
            chosen = tuple(sorted(set(buckets or self.default_buckets)))
            if any(b < 2 for b in chosen):
                raise InvalidRequestError(f"buckets {list(chosen)}: every bucket must be at least 2 tokens")
            self.static_rows = pkg.fixed_rows or 1
            self.buckets = tuple(b for b in chosen if b < pkg.max_length) + (pkg.max_length,)
        else:
            self.static_rows, self.buckets = 0, ()
        self.execution = execution or ("process" if on_npu else "inline")
        self.provider_options = dict(provider_options or {})
        self.cache_dir = cache_root(cache_dir, self.cache_name)
        dynamic_graph = pkg.static_shape is None and pkg.fixed_rows is None
        self.cpu_max_tokens = cpu_max_tokens if on_npu and self.static and dynamic_graph else 0
        if self.cpu_max_tokens:  # a bucket that short would never run (what fits it goes to the CPU): not compiled
            self.buckets = tuple(b for b in self.buckets if b > self.cpu_max_tokens) or self.buckets[-1:]
        self.intra_op_threads = intra_op_threads
        self.max_shapes = max_shapes
        self.idle_timeout = idle_timeout
        self.max_padding: float | None = MAX_PADDING
        if self.provider == NPU_PROVIDER:
            compile_config(self.provider_options)  # a bad config_file is an error now, not at the first call
        self.cache = EncoderCache(
            root=self.cache_dir,
            vitisai_dir=self.cache_dir / "vitisai" if cache_dir is not None else None,
            name=pkg.name,
            onnx_file=pkg.onnx_file,
            ort_version=str(ort.__version__),
            provider_options=self.provider_options,
        )
        self.sessions = SessionPool(pkg.name, max_shapes, idle_timeout)
        tokenizers = import_tokenizers()
        self.tokenizer = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.truncating_tokenizer = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file))
        self.truncating_tokenizer.no_padding()
        self.truncating_tokenizer.enable_truncation(pkg.max_length, strategy=self.truncation)
        padding = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file)).padding
        if padding and isinstance(padding.get("pad_id"), int):
            self._pad_id: int = padding["pad_id"]
        else:  # BERT's and XLM-RoBERTa's pad tokens; padded positions are masked, so any id is exact
            ids = (self.tokenizer.token_to_id(t) for t in ("[PAD]", "<pad>"))
            self._pad_id = next((i for i in ids if i is not None), 0)

    @classmethod
    def get(cls, model: str | os.PathLike[str], **settings: Any) -> Self:
        """The shared engine for a folder, an embedded name or a Hugging Face repo id, and these settings."""
        from ..package.hub import resolve_model

        path = resolve_model(model, missing_hint=cls.missing_hint).resolve()
        opened = {name: settings.pop(name, None) for name in cls.package_options}
        if "isolation" in settings:  # the former name: the same engine as for its new spelling
            former = settings.pop("isolation")
            settings["execution"] = execution_setting(settings.get("execution"), former, cls.__name__)
        given = inspect.signature(cls.__init__).bind(None, None, **settings)
        given.apply_defaults()  # the same engine whether a default is given or left out
        every = {k: v for k, v in given.arguments.items() if k not in ("self", "package")}
        plain = {k: tuple(v) if isinstance(v, list) else v for k, v in every.items() if k != "provider_options"}
        options = tuple(sorted((settings.get("provider_options") or {}).items()))
        key = EncoderSlot(cls, str(path), tuple(opened.items()), tuple(sorted(plain.items())), options)
        return cls.registry.get(key, lambda: cls(cls.package_type.open(path, **opened), **settings))

    # -- information ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The package's description plus how this engine runs it."""
        out = self.package.describe()
        out.update(
            {
                "provider": self.provider,
                "run_shapes": "static" if self.static else "dynamic",
                "buckets": list(self.buckets),
                "static_rows": self.static_rows or None,
                "execution": self.execution,
                "max_shapes": self.max_shapes,
                "idle_timeout": self.idle_timeout,
                "cpu_max_tokens": self.cpu_max_tokens or None,
                "compile_cache": self.compile_report() if self.provider == NPU_PROVIDER else None,
            }
        )
        return out

    def compile_report(self) -> dict[str, Any]:
        """Where the NPU's compiles go and what is there for each static shape (``info``, ``doctor``).

        See :meth:`~.cache.EncoderCache.report`.

        Raises:
            ConfigError: the compile configuration cannot be read.
        """
        return self.cache.report([s for s in self.session_shapes() if s is not None])

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (empty with ``execution="inline"``)."""
        return [b.pid for b in self.sessions.backends().values() if isinstance(b, WorkerBackend) and b.pid is not None]

    def open_shapes(self) -> list[Shape]:
        """The shapes whose sessions are open now, least recently used first (None: dynamic)."""
        return self.sessions.shapes()

    def session_shapes(self) -> list[Shape]:
        """Every shape this engine may open a session for: its static buckets, and None for a dynamic session.

        On the CPU that is one dynamic session; on the NPU one static shape per bucket, and the
        CPU's dynamic session when small inputs go there (:attr:`cpu_max_tokens`).
        """
        if not self.static:
            return [None]
        shapes: list[Shape] = [(self.static_rows, b) for b in self.buckets]
        return shapes + [None] if self.cpu_max_tokens else shapes

    def session_provider(self, shape: Shape) -> str:
        """The execution provider a session of ``shape`` asks for first (an NPU engine's dynamic session: the CPU)."""
        return CPU_PROVIDER if self.provider == NPU_PROVIDER and shape is None else self.provider

    def shape_state(self, shape: Shape) -> ShapeState:
        """What is on disk for ``shape``: ``compiled`` (NPU), ``opened`` (by a warmup), ``partial`` or ``absent``."""
        return self.cache.state(shape, self.session_provider(shape))

    def placement(self, shape: Shape) -> Placement:
        """Where a session of ``shape`` runs (on VitisAI: the pass summary's share of operators on the NPU)."""
        return self.cache.placement(shape, self.session_provider(shape))

    def open_shape(self, shape: Shape, *, announce: bool = True) -> float:
        """Open ``shape``'s session now (on the NPU: compile it, or load it from the cache); seconds it took.

        An open session is reused (about 0 seconds). ``announce=False`` leaves the progress to the
        caller (``ryzenai-llm warmup`` shows its own bar). The session stays open as a call's
        would (``idle_timeout``, ``max_shapes``).

        Raises:
            InvalidRequestError: a shape this engine does not run (see :meth:`session_shapes`).
            GenerationError: the session could not be opened (a worker that did not start in time...).
        """
        if shape not in self.session_shapes():
            shown = [shape_label(s) for s in self.session_shapes()]
            raise InvalidRequestError(
                f"{self.package.name} has no session of shape {shape_label(shape)}; its shapes: {shown}"
            )
        start = time.monotonic()
        with self._session(shape, announce=announce):
            return time.monotonic() - start

    # -- sessions ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _session(self, shape: Shape, *, announce: bool = True) -> Iterator[Backend]:
        """The session of ``shape`` for one run (opened if needed; not closed while it runs)."""
        with self.sessions.lease(shape, lambda: self._backend(shape)) as backend:
            self._open(shape, backend, announce)
            yield backend

    def _backend(self, shape: Shape) -> Backend:
        """A new, unopened session of ``shape``: in a worker, or here (a CPU session of an NPU engine is)."""
        spec = self.session_spec(shape)
        inline = self.execution == "inline" or spec.providers[0] == CPU_PROVIDER != self.provider
        return LocalBackend(spec) if inline else WorkerBackend(spec)

    def _open(self, shape: Shape, backend: Backend, announce: bool) -> None:
        """Open ``backend``'s session if it is not open; on the NPU shown while it compiles, then placed."""
        if backend.is_open:
            return
        provider = self.session_provider(shape)
        if provider != NPU_PROVIDER or shape is None:
            backend.open()
            return
        state = self.cache.state(shape, provider)
        wrap: Opener | None = None
        if announce:
            name = self.package.name

            shown = "compiled" if state == "opened" else state  # a warmup opened it: a load from the cache

            def wrap(create: Callable[[], Any]) -> Any:
                return with_compile_progress(create, name=name, shape=shape, state=shown)

        if not backend.open(wrap, None if state == "compiled" else compile_deadline()):
            return  # another call opened it meanwhile
        placed = self.cache.placement(shape, provider)
        say = log.warning if placed.ran_on == "cpu" else log.info  # "VitisAI requested, ran on the CPU" is a warning
        say("%s (%s): %s", self.package.name, placed.shape, placed.detail)

    # -- a call ---------------------------------------------------------------------------------

    @staticmethod
    def check_call(on_overflow: str, batch_size: int) -> None:
        """Refuse an ``on_overflow`` or a ``batch_size`` a call cannot run with.

        Raises:
            InvalidRequestError: either is out of its range.
        """
        if on_overflow not in ("truncate", "error"):
            raise InvalidRequestError(f"on_overflow {on_overflow!r} is not one of 'truncate', 'error'")
        if batch_size < 1:
            raise InvalidRequestError(f"batch_size is {batch_size}; it must be at least 1")

    def encode_within_limit(
        self, inputs: list[Any], on_overflow: str, too_long: Callable[[int, int, int], str]
    ) -> tuple[list[Any], list[int]]:
        """The tokenizer's encodings of ``inputs`` (texts, or (query, passage) pairs), none over the maximum length.

        With ``on_overflow="truncate"`` an input over it is encoded again by
        :attr:`truncating_tokenizer`; with ``"error"`` the first is refused with the message
        ``too_long(index, tokens, inputs_over)``.

        Returns:
            the encodings, and the indices of the inputs that were cut.

        Raises:
            InvalidRequestError: an input over the maximum length, with ``on_overflow="error"``.
        """
        encodings = self.tokenizer.encode_batch(inputs)
        limit = self.package.max_length
        over = [i for i, e in enumerate(encodings) if len(e.ids) > limit]
        if over and on_overflow == "error":
            raise InvalidRequestError(too_long(over[0], len(encodings[over[0]].ids), len(over)))
        if over:
            for i, enc in zip(over, self.truncating_tokenizer.encode_batch([inputs[i] for i in over]), strict=True):
                encodings[i] = enc
        return encodings, over

    def run_batches(
        self, encodings: Sequence[Any], batch_size: int, progress: Callable[[int], None] | None
    ) -> BatchRun:
        """The planned batches of ``encodings`` (:func:`.plan_batches`), to run by iterating."""
        lengths = [len(e.ids) for e in encodings]
        buckets, rows = self.buckets or None, self.static_rows or None
        batches = plan_batches(
            lengths,
            batch_size=batch_size,
            buckets=buckets,
            static_rows=rows,
            max_padding=self.max_padding,
            dynamic_up_to=self.cpu_max_tokens,
        )
        return BatchRun(lengths, batches, lambda batch: self.run_batch(batch, encodings), progress)

    def where(self, run: BatchRun) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Where a call's runs ran: each shape's placement (described), and each input's shape label."""
        shapes = run.input_shapes()
        return {shape_label(s): self.placement(s).describe() for s in dict.fromkeys(shapes)}, [
            shape_label(s) for s in shapes
        ]

    def run_batch(self, batch: Batch, encodings: Sequence[Any]) -> np.ndarray:
        """Run one planned batch of tokenizer encodings, padded to its shape; the session's output."""
        import numpy as np

        ids = np.full((batch.rows, batch.length), self._pad_id, dtype=np.int64)
        mask = np.zeros((batch.rows, batch.length), dtype=np.int64)
        types = np.zeros((batch.rows, batch.length), dtype=np.int64)
        for row, i in enumerate(batch.indices):
            enc = encodings[i]
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        for row in range(len(batch.indices), batch.rows):
            ids[row, 0] = self._pad_id
            mask[row, 0] = 1  # filler rows: one visible token keeps every softmax finite
        with self._session(batch.shape) as backend:
            out: np.ndarray = backend.run(ids, mask, types)
        return out

    def session_pooling(self) -> Pooling | None:
        """How sessions pool their output (None: they return it as it is)."""
        return None

    def session_spec(self, shape: Shape) -> SessionSpec:
        """What a session of ``shape`` is opened with: its model file, providers and their options."""
        pkg = self.package
        model_file = pkg.onnx_file
        if shape is not None and pkg.static_shape is None:
            model_file = self.cache.static_variant(*shape)
        providers: tuple[str, ...] = (CPU_PROVIDER,)
        options: tuple[dict[str, str], ...] = ({},)
        provider = self.session_provider(shape)
        if provider == NPU_PROVIDER and shape is not None:
            providers, options = (NPU_PROVIDER, CPU_PROVIDER), (dict(self.cache.vitisai_options(shape)), {})
        elif provider != CPU_PROVIDER:  # CUDA, DirectML: the CPU takes what they do not
            providers, options = (provider, CPU_PROVIDER), (dict(self.provider_options), {})
        return SessionSpec(
            onnx_file=str(model_file),
            providers=providers,
            provider_options=options,
            inputs=pkg.inputs,
            output=pkg.output,
            pooling=self.session_pooling(),
            intra_op_threads=self.intra_op_threads,
        )

    def __copy__(self) -> Self:
        return self  # copies of a face share the engine, its sessions and workers

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its folder and settings; unpickled into a new engine (sessions open on use)."""
        return (_rebuild_engine, (type(self), self.package, self._settings))

    def close(self) -> None:
        """Stop the workers and drop the sessions (the next call opens them again)."""
        self.sessions.close()


def _rebuild_engine(cls: type[EncoderEngine[Any]], package: Any, settings: dict[str, Any]) -> EncoderEngine[Any]:
    return cls(package, **settings)
