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
import hashlib
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NamedTuple, Protocol, TypeVar

from ..errors import InvalidRequestError, RuntimeNotAvailableError
from ..lifecycle import REGISTRY, Registry
from ..options import check_runtime_settings, execution_setting
from .batches import MAX_PADDING, Batch, BatchRun, plan_batches
from .folder import import_onnx, import_tokenizers
from .runner import LocalBackend, Pooling, SessionSpec, WorkerBackend, import_onnxruntime

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self

__all__ = [
    "CPU_PROVIDER",
    "DEFAULT_EMBEDDING_BUCKETS",
    "DEFAULT_IDLE_TIMEOUT",
    "NPU_PROVIDER",
    "EncoderEngine",
    "EncoderSlot",
    "file_digest",
]

log = logging.getLogger("ryzenai_core")

#: Sequence-length buckets for static shapes when the folder has a dynamic model.
DEFAULT_EMBEDDING_BUCKETS: tuple[int, ...] = (32, 64, 128, 256, 512)
NPU_PROVIDER = "VitisAIExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
#: onnxruntime's execution provider for each device name of :data:`~ryzenai_core.options.PROVIDERS`,
#: and what to install where onnxruntime lacks it.
_ONNXRUNTIME_PROVIDERS: dict[str, tuple[str, str]] = {
    "npu": (NPU_PROVIDER, "run in the Ryzen AI environment (its onnxruntime-vitisai)"),
    "cuda": ("CUDAExecutionProvider", "install onnxruntime-gpu in place of onnxruntime"),
    "dml": ("DmlExecutionProvider", "install onnxruntime-directml in place of onnxruntime (Windows)"),
    "cpu": (CPU_PROVIDER, ""),
}


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (it keys static variants and the VitisAI cache)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache_root(cache_dir: str | os.PathLike[str] | None, name: str) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "ryzenai-llm" / name


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
Shape = tuple[int, int] | None


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
        provider_options: VitisAI options over the defaults (``cache_dir`` and a ``cache_key``
            that changes with the model file, the shape and the onnxruntime version).
        execution: ``"process"`` (a worker per session) or ``"inline"`` (this process);
            default: process on the NPU, inline on the CPU.
        isolation: the former name of ``execution`` (``"thread"`` for ``"inline"``), deprecated.
        cache_dir: where static variants of a dynamic graph and the VitisAI cache go (default
            ``~/.cache/ryzenai-llm/<cache_name>``).
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
        self.cache_dir = _cache_root(cache_dir, self.cache_name)
        self.intra_op_threads = intra_op_threads
        self.max_shapes = max_shapes
        self.idle_timeout = idle_timeout
        self.max_padding: float | None = MAX_PADDING
        self._ort_version = str(ort.__version__)
        self._backends: dict[Shape, LocalBackend | WorkerBackend] = {}  # least recently used first
        self._leases: dict[Shape, int] = {}  # calls running on each shape's session now
        self._used: dict[Shape, float] = {}  # when each shape's session was last released
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._digest: str | None = None
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
            }
        )
        return out

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (empty with ``execution="inline"``)."""
        return [b.pid for b in self._backends.values() if isinstance(b, WorkerBackend) and b.pid is not None]

    def open_shapes(self) -> list[Shape]:
        """The shapes whose sessions are open now, least recently used first (None: dynamic)."""
        with self._lock:
            return list(self._backends)

    # -- sessions ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _session(self, shape: Shape) -> Iterator[LocalBackend | WorkerBackend]:
        """The session of ``shape`` for one run (opened if needed; not closed while it runs)."""
        with self._lock:
            backend = self._backends.pop(shape, None)
            if backend is None:
                spec = self._spec(shape)
                backend = WorkerBackend(spec) if self.execution == "process" else LocalBackend(spec)
            self._backends[shape] = backend
            self._leases[shape] = self._leases.get(shape, 0) + 1
            closing = self._over_limit()
        self._close(closing, "to stay within max_shapes")
        try:
            yield backend
        finally:
            with self._lock:
                left = self._leases.pop(shape, 1) - 1
                if left:
                    self._leases[shape] = left
                if self._backends.get(shape) is backend:
                    self._used[shape] = time.monotonic()
                closing = self._over_limit()
                self._arm_idle_timer()
            self._close(closing, "to stay within max_shapes")

    def _over_limit(self) -> list[tuple[Shape, LocalBackend | WorkerBackend]]:
        """Take out the least recently used idle sessions beyond ``max_shapes`` (holding the lock)."""
        out: list[tuple[Shape, LocalBackend | WorkerBackend]] = []
        if self.max_shapes is None:
            return out
        idle = [s for s in self._backends if not self._leases.get(s)]
        while len(self._backends) > self.max_shapes and idle:
            shape = idle.pop(0)
            out.append((shape, self._backends.pop(shape)))
            self._used.pop(shape, None)
        return out

    def _arm_idle_timer(self) -> None:
        """Start the timer that closes the next session to go idle for ``idle_timeout`` (holding the lock)."""
        if self.idle_timeout is None or self._timer is not None:
            return
        idle = [self._used[s] for s in self._backends if not self._leases.get(s) and s in self._used]
        if not idle:
            return
        delay = max(0.0, min(idle) + self.idle_timeout - time.monotonic())
        timer = threading.Timer(delay, _close_idle, args=(weakref.ref(self),))
        timer.daemon = True  # a pending timer never keeps the program from exiting
        timer.name = f"ryzenai-idle-{self.package.name}"
        self._timer = timer
        timer.start()

    def _close_idle(self) -> None:
        assert self.idle_timeout is not None
        now = time.monotonic()
        with self._lock:
            self._timer = None
            idle = [
                s
                for s in self._backends
                if not self._leases.get(s) and s in self._used and now - self._used[s] >= self.idle_timeout
            ]
            closing = [(s, self._backends.pop(s)) for s in idle]
            for s in idle:
                del self._used[s]
            self._arm_idle_timer()
        self._close(closing, f"after {self.idle_timeout:g} s unused")

    def _close(self, sessions: list[tuple[Shape, LocalBackend | WorkerBackend]], why: str) -> None:
        for shape, backend in sessions:
            log.info("closing %s's session of shape %s %s", self.package.name, shape or "dynamic", why)
            backend.close()

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
            lengths, batch_size=batch_size, buckets=buckets, static_rows=rows, max_padding=self.max_padding
        )
        return BatchRun(lengths, batches, lambda batch: self.run_batch(batch, encodings), progress)

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
        with self._session((batch.rows, batch.length) if self.static else None) as backend:
            out: np.ndarray = backend.run(ids, mask, types)
        return out

    def session_pooling(self) -> Pooling | None:
        """How sessions pool their output (None: they return it as it is)."""
        return None

    def _spec(self, shape: Shape) -> SessionSpec:
        pkg = self.package
        model_file = pkg.onnx_file
        if shape is not None and pkg.static_shape is None:
            model_file = self._static_variant(*shape)
        providers: tuple[str, ...] = (CPU_PROVIDER,)
        options: tuple[dict[str, str], ...] = ({},)
        if self.provider == NPU_PROVIDER:
            if self._digest is None:
                self._digest = file_digest(pkg.onnx_file)
            rows, seq = shape or (0, 0)
            vitis = {
                "cache_dir": str(self.cache_dir / "vitisai"),
                "cache_key": f"{pkg.name}-{self._digest[:16]}-{rows}x{seq}-ort{self._ort_version}",
            }
            vitis.update(self.provider_options)
            providers, options = (NPU_PROVIDER, CPU_PROVIDER), (vitis, {})
        elif self.provider != CPU_PROVIDER:  # CUDA, DirectML: the CPU takes what they do not
            providers, options = (self.provider, CPU_PROVIDER), (dict(self.provider_options), {})
        return SessionSpec(
            onnx_file=str(model_file),
            providers=providers,
            provider_options=options,
            inputs=pkg.inputs,
            output=pkg.output,
            pooling=self.session_pooling(),
            intra_op_threads=self.intra_op_threads,
        )

    def _static_variant(self, rows: int, seq: int) -> Path:
        """The dynamic graph with its (batch, sequence) axes fixed, cached on disk."""
        if self._digest is None:
            self._digest = file_digest(self.package.onnx_file)
        folder = self.cache_dir / "static" / f"{self.package.name}-{self._digest[:16]}"
        target = folder / f"model_{rows}x{seq}.onnx"
        if target.is_file():
            return target
        onnx = import_onnx()
        from onnxruntime.tools.onnx_model_utils import fix_output_shapes, make_dim_param_fixed

        model = onnx.load(str(self.package.onnx_file))
        ids = next(i for i in model.graph.input if i.name == "input_ids")
        batch_dim, seq_dim = ids.type.tensor_type.shape.dim
        for dim, value in ((batch_dim, rows), (seq_dim, seq)):
            if dim.HasField("dim_param") and dim.dim_param:
                make_dim_param_fixed(model.graph, dim.dim_param, value)
        fix_output_shapes(model)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        large = model.ByteSize() > 1_800_000_000
        onnx.save_model(model, str(tmp), save_as_external_data=large, location=tmp.name + ".data" if large else None)
        os.replace(tmp, target)
        return target

    def __copy__(self) -> Self:
        return self  # copies of a face share the engine, its sessions and workers

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its folder and settings; unpickled into a new engine (sessions open on use)."""
        return (_rebuild_engine, (type(self), self.package, self._settings))

    def close(self) -> None:
        """Stop the workers and drop the sessions (the next call opens them again)."""
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
            self._leases.clear()
            self._used.clear()
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for backend in backends:
            backend.close()


def _close_idle(ref: weakref.ref[EncoderEngine[Any]]) -> None:
    engine = ref()  # the timer holds no strong reference: an engine nobody uses can be collected
    if engine is not None:
        engine._close_idle()


def _rebuild_engine(cls: type[EncoderEngine[Any]], package: Any, settings: dict[str, Any]) -> EncoderEngine[Any]:
    return cls(package, **settings)
