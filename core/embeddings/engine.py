"""Embedding models: a folder read once, texts in, pooled and normalised vectors out.

An embedding folder is what Hugging Face ships for sentence-transformers models
(``onnx/model.onnx``, ``tokenizer.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``, ``modules.json``) or what AMD's NPU examples export (one
``model.onnx`` with a static ``(1, 512)`` shape beside the tokenizer). :class:`EmbeddingPackage`
reads it once; :class:`EmbeddingEngine` runs it with onnxruntime:

- on a Ryzen AI machine, onnxruntime's VitisAI execution provider with **static shapes**:
  texts are sorted by length and padded up to sequence-length buckets (the same bucket
  accounting as LLM prefill, :class:`~ryzenai_core.package.budget.ContextBudget`), each shape in a
  worker process of its own (several VitisAI sessions in one process break each other, and
  session creation can crash the process: a crash is an error for the call, the next call
  starts a new worker);
- elsewhere, the CPU provider with dynamic shapes and length-sorted batches, in this process
  (onnxruntime releases the GIL while it runs).

Each shape's session closes after ``idle_timeout`` seconds unused, and ``max_shapes`` caps how
many stay open: the LLM, the embedder and the reranker share one NPU. The folder reader
(:class:`EncoderFolder`), the batch plan, the runner, the backends, the engine's machinery
(:class:`EncoderEngine`) and the faces' settings (:class:`EncoderSettings`) serve the reranker
(:mod:`ryzenai_core.rerank`) as well.

Padding never changes a vector: padded positions are masked in attention and left out of the
pooling. Pooling (CLS or mean, from the folder's config) and L2 normalisation run on the host
in numpy. Texts longer than the model's maximum length are truncated and the result says
which (or, with ``on_overflow="error"``, rejected). onnxruntime and tokenizers are imported
only when a model is loaded; they come with the ``embeddings`` extra.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field, PrivateAttr

from ..errors import (
    ConfigError,
    InvalidRequestError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    ModelPackageError,
    RuntimeNotAvailableError,
    UnsupportedModelError,
)
from ..messages import check_prompt_text
from ..package.budget import ContextBudget
from ..package.folder import _is_lfs_pointer, _read_json
from ..package.hub import package_name
from .runner import LocalBackend, Pooling, SessionSpec, WorkerBackend, import_onnxruntime, pool

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self

__all__ = [
    "BGE_QUERY_INSTRUCTION",
    "DEFAULT_EMBEDDING_BUCKETS",
    "DEFAULT_IDLE_TIMEOUT",
    "EmbeddingEngine",
    "EmbeddingPackage",
    "EmbeddingResult",
    "EmbeddingSettings",
    "EncoderEngine",
    "EncoderFolder",
    "EncoderSettings",
    "SessionSpec",
    "import_onnxruntime",
    "is_embedding_folder",
    "l2_normalize",
    "plan_batches",
    "pool",
]

log = logging.getLogger("ryzenai_core")

#: BGE English v1.5's query instruction (its model card); documents get none.
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
#: Sequence-length buckets for static shapes when the folder has a dynamic model.
DEFAULT_EMBEDDING_BUCKETS: tuple[int, ...] = (32, 64, 128, 256, 512)
NPU_PROVIDER = "VitisAIExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_HIDDEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_EXTRA = "pip install 'ryzenai-llm[embeddings]'"

Kind = Literal["query", "document"]


def _import(module: str, why: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeNotAvailableError(f"{why} ({exc}). Install it with {_EXTRA}") from exc


def _import_tokenizers() -> Any:
    return _import("tokenizers", "embedding models need Hugging Face's `tokenizers` package")


def _import_onnx() -> Any:
    return _import("onnx", "reading an embedding model's graph needs the `onnx` package")


# ---------------------------------------------------------------------------------------------
# The folder


def _find_onnx(folder: Path, onnx_file: str | None, export_hint: str) -> Path:
    if onnx_file is not None:
        path = folder / onnx_file
        # Lexically inside: a Hugging Face snapshot's files are links into the repository's blobs/.
        if ".." in Path(onnx_file).parts or not Path(os.path.normpath(path)).is_relative_to(folder):
            raise InvalidRequestError(f"onnx_file {onnx_file!r} is outside the model folder {folder}")
        if not path.is_file():
            raise ModelNotFoundError(f"onnx_file {onnx_file!r} does not exist in {folder}", path=path)
        return path
    for candidate in (folder / "onnx" / "model.onnx", folder / "model.onnx"):
        if candidate.is_file():
            return candidate
    found = sorted(p for p in [*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])
    if len(found) == 1:
        return found[0]
    if not found:
        raise ModelNotFoundError(
            f"no ONNX model in {folder} (looked for onnx/model.onnx, model.onnx, *.onnx). Export one, e.g. "
            f"`{export_hint}`",
            path=folder,
        )
    names = ", ".join(str(p.relative_to(folder)) for p in found)
    raise InvalidRequestError(f"{folder} holds several ONNX models ({names}); choose one with onnx_file=...")


def is_embedding_folder(path: str | os.PathLike[str]) -> bool:
    """True for a folder that looks like an embedding model rather than an LLM package."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "genai_config.json").is_file():
        return False
    has_onnx = any(folder.glob("*.onnx")) or any(folder.glob("onnx/*.onnx"))
    return has_onnx and ((folder / "modules.json").is_file() or (folder / "tokenizer.json").is_file())


def _json_or_none(path: Path, what: str) -> Any:
    return _read_json(path, what) if path.is_file() else None


def _pooling_config(folder: Path) -> tuple[Path | None, Any]:
    modules = _json_or_none(folder / "modules.json", "sentence-transformers module list")
    if isinstance(modules, list):
        for module in modules:
            if isinstance(module, dict) and str(module.get("type", "")).endswith("Pooling"):
                path = folder / str(module.get("path", "1_Pooling")) / "config.json"
                return path, _json_or_none(path, "pooling config")
    path = folder / "1_Pooling" / "config.json"
    return path, _json_or_none(path, "pooling config")


def _dims(value_info: Any) -> list[int | str | None]:
    out: list[int | str | None] = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return out


#: Model types that number positions from ``pad_token_id + 1`` (RoBERTa's scheme): of
#: ``max_position_embeddings`` rows, ``pad_token_id + 1`` are never a token's.
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "xlm-roberta-xl")


@dataclass(frozen=True)
class EncoderFolder:
    """What every ONNX encoder folder says the same way, read once: files, configs, graph, length.

    Embedding models and cross-encoders (rerankers) are both BERT-style encoders shipped as
    Hugging Face lays them out; :meth:`read` does the checks they share, and each package adds
    what is its own (pooling, labels).

    Attributes:
        path: the folder.
        name: its name (a Hugging Face cache snapshot is named by its repository).
        onnx_file: the ONNX model that runs.
        tokenizer_file: ``tokenizer.json``.
        config: ``config.json`` (empty without one).
        tokenizer_config: ``tokenizer_config.json`` (empty without one).
        inputs: the graph's inputs this engine feeds, in feeding order.
        outputs: every graph output with its dimensions.
        static_shape: ``(rows, sequence)`` when ``input_ids`` has fixed sizes, else None.
        fixed_rows: the graph's batch size when it is fixed.
        max_length: the longest input in tokens (special tokens included).
        max_length_source: which file set ``max_length``.
    """

    path: Path
    name: str
    onnx_file: Path
    tokenizer_file: Path
    config: dict[str, Any]
    tokenizer_config: dict[str, Any]
    inputs: tuple[str, ...]
    outputs: dict[str, list[int | str | None]]
    static_shape: tuple[int, int] | None
    fixed_rows: int | None
    max_length: int
    max_length_source: str

    @classmethod
    def read(
        cls,
        path: str | os.PathLike[str],
        *,
        onnx_file: str | None,
        what: str,
        task: str,
        example: str,
        limits: Sequence[tuple[int, str]] = (),
    ) -> EncoderFolder:
        """Read the parts every encoder folder shares.

        Args:
            path: the folder.
            onnx_file: the ONNX file inside it, when the folder ships several.
            what: what the folder is, for messages (``"embedding model"``, ``"reranker"``).
            task: optimum's export task for the model (``"feature-extraction"``).
            example: a Hugging Face repository of such a model, for the export hint.
            limits: length limits the caller's own configs set, with their sources; the
                smallest of these and the shared ones wins.

        Raises:
            ModelNotFoundError: no folder, or no ONNX model in it.
            MissingTokenizerError: no ``tokenizer.json``.
            LfsPointerError: the model, the tokenizer or a config is a Git LFS pointer.
            UnsupportedModelError: the graph has inputs this engine cannot feed.
            ConfigError: no maximum length anywhere, or one that cannot be used.
        """
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ModelNotFoundError(f"{what} folder {str(path)!r} does not exist", path=folder)
        export = f"optimum-cli export onnx --task {task} --model {example} FOLDER"
        model_file = _find_onnx(folder, onnx_file, export)
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise MissingTokenizerError(
                f"no tokenizer.json in {folder}: the {what} engine reads Hugging Face's fast tokenizer file. "
                "Save it beside the model with `AutoTokenizer.from_pretrained(REPO).save_pretrained(FOLDER)`",
                path=folder,
            )
        for f in (model_file, tokenizer_file):
            if _is_lfs_pointer(f):
                raise LfsPointerError(
                    f"{f.relative_to(folder)} is a Git LFS pointer, not its content: run `git lfs pull` in {folder}",
                    path=f,
                )
        config = _json_or_none(folder / "config.json", "model config") or {}
        tok_config = _json_or_none(folder / "tokenizer_config.json", "tokenizer config") or {}

        onnx = _import_onnx()
        try:
            model = onnx.load(str(model_file), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, a truncated file
            raise ModelPackageError(
                f"{model_file.relative_to(folder)} cannot be read as an ONNX model ({type(exc).__name__}: {exc}; "
                f"{model_file.stat().st_size} bytes): the file is damaged or incomplete. Download it again "
                f"(`ryzenai-llm pull REPO_ID`, or `hf download REPO_ID`) or export the model again",
                path=model_file,
            ) from exc
        initializers = {i.name for i in model.graph.initializer}
        graph_inputs = {i.name: _dims(i) for i in model.graph.input if i.name not in initializers}
        unknown = sorted(set(graph_inputs) - set(_INPUTS))
        if unknown or "input_ids" not in graph_inputs:
            raise UnsupportedModelError(
                f"{model_file.name} takes inputs {sorted(graph_inputs)}; this engine feeds {list(_INPUTS)} "
                f"(BERT-style encoders). Export the model with those inputs (optimum's {task} task)",
                path=model_file,
            )
        ids_dims = graph_inputs["input_ids"]
        if len(ids_dims) != 2:
            raise UnsupportedModelError(
                f"{model_file.name}'s input_ids has shape {ids_dims}; expected (batch, sequence)", path=model_file
            )
        static = (
            (ids_dims[0], ids_dims[1]) if isinstance(ids_dims[0], int) and isinstance(ids_dims[1], int) else None
        )

        found = list(limits)
        if isinstance(tok_config.get("model_max_length"), int) and tok_config["model_max_length"] < 1_000_000:
            found.append((tok_config["model_max_length"], "tokenizer_config.json model_max_length"))
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int):
            pad = config.get("pad_token_id")
            if config.get("model_type") in _OFFSET_POSITIONS and isinstance(pad, int) and 0 <= pad < positions:
                found.append(
                    (
                        positions - pad - 1,
                        f"config.json max_position_embeddings {positions}, less the {pad + 1} positions "
                        f"{config['model_type']} keeps for padding",
                    )
                )
            else:
                found.append((positions, "config.json max_position_embeddings"))
        if isinstance(ids_dims[1], int):
            found.append((ids_dims[1], f"the graph's static sequence length ({model_file.name})"))
        if not found:
            raise ConfigError(
                f"{folder} does not say its maximum input length (sentence_bert_config.json max_seq_length, "
                "tokenizer_config.json model_max_length or config.json max_position_embeddings); add one",
                path=folder,
            )
        max_length, length_source = min(found, key=lambda t: t[0])
        if max_length < 2:
            raise ConfigError(f"{length_source} is {max_length}; it must be at least 2 tokens", path=folder)

        name = package_name(folder.absolute())  # a Hugging Face cache snapshot: the repository's name
        return cls(
            path=folder,
            name=name,
            onnx_file=model_file,
            tokenizer_file=tokenizer_file,
            config=config,
            tokenizer_config=tok_config,
            inputs=tuple(n for n in _INPUTS if n in graph_inputs),
            outputs={o.name: _dims(o) for o in model.graph.output},
            static_shape=static,
            fixed_rows=ids_dims[0] if isinstance(ids_dims[0], int) and ids_dims[0] > 0 else None,
            max_length=max_length,
            max_length_source=length_source,
        )


@dataclass(frozen=True)
class EmbeddingPackage:
    """An embedding model folder, read once.

    Attributes:
        path: the folder.
        name: its name.
        onnx_file: the ONNX model that runs.
        tokenizer_file: ``tokenizer.json``.
        pooling: ``"cls"`` or ``"mean"``; ``pooling_source`` says where it came from.
        normalize: L2-normalise vectors by default (sentence-transformers' Normalize module).
        max_length: the longest input in tokens (special tokens included).
        max_length_source: which file set ``max_length``.
        dims: vector size, when the graph says it.
        static_shape: ``(rows, sequence)`` when the graph's inputs have fixed sizes (AMD's
            exports), else None (dynamic axes).
        inputs: the graph's inputs (a subset of input_ids, attention_mask, token_type_ids).
        output: the graph output that holds per-token hidden states.
        query_instruction: prefix for queries (BGE's for BGE models, else empty).
        document_instruction: prefix for documents.
        model_type: ``config.json``'s model_type, if any.
    """

    path: Path
    name: str
    onnx_file: Path
    tokenizer_file: Path
    pooling: Pooling
    pooling_source: str
    normalize: bool
    max_length: int
    max_length_source: str
    dims: int | None
    static_shape: tuple[int, int] | None
    inputs: tuple[str, ...]
    output: str
    query_instruction: str = ""
    document_instruction: str = ""
    model_type: str | None = None
    fixed_rows: int | None = None
    """The graph's batch size when it is fixed (with a dynamic sequence axis too)."""
    outputs: dict[str, list[int | str | None]] = field(default_factory=dict)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, onnx_file: str | None = None, pooling: Pooling | None = None
    ) -> EmbeddingPackage:
        """Read an embedding folder.

        Args:
            path: the folder.
            onnx_file: the ONNX file inside it, when the folder ships several (``onnx/model_O4.onnx``).
            pooling: override the folder's pooling (``"cls"`` or ``"mean"``).

        Raises:
            ModelNotFoundError: no folder, or no ONNX model in it.
            MissingTokenizerError: no ``tokenizer.json``.
            LfsPointerError: the model or tokenizer is a Git LFS pointer.
            UnsupportedModelError: the graph has inputs this engine cannot feed, or no per-token
                output for the pooling.
            ConfigError: a pooling mode or length in the configs that cannot be used.
        """
        folder = Path(path).expanduser()
        st_config = _json_or_none(folder / "sentence_bert_config.json", "sentence-transformers config") or {}
        limits = []
        if isinstance(st_config.get("max_seq_length"), int):
            limits.append((st_config["max_seq_length"], "sentence_bert_config.json max_seq_length"))
        base = EncoderFolder.read(
            folder,
            onnx_file=onnx_file,
            what="embedding model",
            task="feature-extraction",
            example="BAAI/bge-small-en-v1.5",
            limits=limits,
        )
        pool_path, pool_cfg = _pooling_config(folder)
        chosen: Pooling
        if pooling is not None:
            if pooling not in ("cls", "mean"):
                raise InvalidRequestError(f"pooling {pooling!r} is not supported; use 'cls' or 'mean'")
            chosen, pooling_source = pooling, "given"
        elif isinstance(pool_cfg, dict):
            assert pool_path is not None
            modes = [k.removeprefix("pooling_mode_").removesuffix("_token") for k, v in pool_cfg.items()
                     if k.startswith("pooling_mode_") and v is True]
            modes = ["mean" if m == "mean_tokens" else m for m in modes]
            if modes not in (["cls"], ["mean"]):
                raise ConfigError(
                    f"{pool_path.relative_to(folder)} asks for pooling {modes or 'none'}; this engine pools "
                    "'cls' or 'mean': pass pooling='cls' or pooling='mean' if one of them fits the model",
                    path=pool_path,
                )
            chosen, pooling_source = ("cls" if modes == ["cls"] else "mean"), str(pool_path.relative_to(folder))
        else:
            chosen, pooling_source = "cls", "default: CLS, as BERT/BGE exports use (no 1_Pooling/config.json)"

        modules = _json_or_none(folder / "modules.json", "sentence-transformers module list")
        if isinstance(modules, list):
            normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
        else:
            normalize = True

        outputs = base.outputs
        model_file = base.onnx_file
        named = [n for n in _HIDDEN_OUTPUTS if n in outputs]
        rank3 = [n for n, d in outputs.items() if len(d) == 3]
        if not named and not rank3:
            shown = ", ".join(f"{n} {d}" for n, d in outputs.items())
            raise UnsupportedModelError(
                f"{model_file.name} has outputs {shown}: none is per-token hidden states (batch, sequence, hidden), "
                f"which {chosen} pooling needs. Export last_hidden_state (optimum's feature-extraction task)",
                path=model_file,
            )
        output = (named or rank3)[0]
        hidden = outputs[output][-1] if len(outputs[output]) == 3 else None
        config = base.config
        ident = " ".join(str(x) for x in (base.name, config.get("_name_or_path", ""))).lower()
        bge_en = "bge" in ident and not any(tag in ident for tag in ("-zh", "m3", "multilingual"))
        return cls(
            path=base.path,
            name=base.name,
            onnx_file=model_file,
            tokenizer_file=base.tokenizer_file,
            pooling=chosen,
            pooling_source=pooling_source,
            normalize=normalize,
            max_length=base.max_length,
            max_length_source=base.max_length_source,
            dims=hidden if isinstance(hidden, int) and hidden > 0 else config.get("hidden_size"),
            static_shape=base.static_shape,
            inputs=base.inputs,
            output=output,
            query_instruction=BGE_QUERY_INSTRUCTION if bge_en else "",
            document_instruction="",
            model_type=config.get("model_type"),
            fixed_rows=base.fixed_rows,
            outputs=outputs,
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (``ryzenai-llm info`` on an embedding folder)."""
        return {
            "kind": "embedding",
            "name": self.name,
            "path": str(self.path),
            "onnx_file": str(self.onnx_file.relative_to(self.path)),
            "model_type": self.model_type,
            "dims": self.dims,
            "pooling": self.pooling,
            "pooling_source": self.pooling_source,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "max_length_source": self.max_length_source,
            "shapes": "static" if self.static_shape else "dynamic",
            "static_shape": list(self.static_shape) if self.static_shape else None,
            "inputs": list(self.inputs),
            "output": self.output,
            "query_instruction": self.query_instruction,
            "document_instruction": self.document_instruction,
        }


# ---------------------------------------------------------------------------------------------
# Pooling, normalisation, batches


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as torch's ``F.normalize``."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.clip(norms, 1e-12, None), dtype=np.float32)


@dataclass(frozen=True)
class Batch:
    """One run of the model: which texts, padded to which shape."""

    indices: tuple[int, ...]
    rows: int
    length: int

    @property
    def filler_rows(self) -> int:
        """Rows of pure padding (a static batch larger than the texts left)."""
        return self.rows - len(self.indices)


def plan_batches(
    lengths: Sequence[int], *, batch_size: int, buckets: Sequence[int] | None = None, static_rows: int | None = None
) -> list[Batch]:
    """Sort texts by length and group them into runs.

    Without buckets (dynamic shapes), each run holds up to ``batch_size`` texts of similar
    length padded to the longest of them. With buckets (static shapes), each text goes to the
    smallest bucket that holds it (LLM prefill's accounting) and each run holds exactly
    ``static_rows`` rows of one bucket, filler rows included.
    """
    if batch_size < 1:
        raise InvalidRequestError(f"batch_size is {batch_size}; it must be at least 1")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[Batch] = []
    if not buckets:
        for start in range(0, len(order), batch_size):
            group = tuple(order[start : start + batch_size])
            batches.append(Batch(group, len(group), max(lengths[i] for i in group)))
        return batches
    longest = max(buckets)
    budget = ContextBudget(window=longest + 1, prompt_limit=longest, prefill_buckets=tuple(sorted(buckets)))
    rows = static_rows or 1
    by_bucket: dict[int, list[int]] = {}
    for i in order:
        bucket = budget.prefill_bucket(lengths[i])
        assert bucket is not None and bucket <= longest, (lengths[i], buckets)
        by_bucket.setdefault(bucket, []).append(i)
    for bucket in sorted(by_bucket):
        members = by_bucket[bucket]
        for start in range(0, len(members), rows):
            batches.append(Batch(tuple(members[start : start + rows]), rows, bucket))
    return batches


def _file_digest(path: Path) -> str:
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


# ---------------------------------------------------------------------------------------------
# Results and the engine


@dataclass(frozen=True)
class EmbeddingResult:
    """Vectors and what they cost.

    Attributes:
        vectors: one vector per text, in the order given.
        tokens: tokens of each text as embedded (after truncation, special tokens included).
        truncated: indices of texts cut to ``max_length``.
        padding: pad tokens added over all runs (filler rows included).
        shapes: the (rows, sequence) shape of each run, in order.
    """

    vectors: list[list[float]]
    tokens: list[int]
    truncated: list[int]
    padding: int
    shapes: list[tuple[int, int]]

    @property
    def padded_tokens(self) -> int:
        """Tokens the model ran: real plus padding."""
        return sum(self.tokens) + self.padding


_ENGINES: dict[tuple[Any, ...], EncoderEngine[Any]] = {}
_ENGINES_LOCK = threading.Lock()
_SAID_CPU: set[str] = set()

#: Seconds a shape's session may stay unused before it is closed (the next call opens it again).
DEFAULT_IDLE_TIMEOUT = 300.0


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
    :meth:`get`.

    Args:
        package: the folder (or its path).
        provider: ``"auto"`` (VitisAI where onnxruntime has it, else CPU), ``"npu"`` or ``"cpu"``.
        shapes: ``"auto"`` (static on the NPU or for a static graph, else dynamic), ``"static"``
            or ``"dynamic"``.
        buckets: sequence lengths for static shapes of a dynamic graph (default
            :attr:`default_buckets`, capped at the model's maximum length). A static graph has
            one shape: its own.
        provider_options: VitisAI options over the defaults (``cache_dir`` and a ``cache_key``
            that changes with the model file, the shape and the onnxruntime version).
        isolation: ``"process"`` (a worker per session) or ``"thread"`` (this process);
            default: process on the NPU, thread on the CPU.
        cache_dir: where static variants of a dynamic graph and the VitisAI cache go (default
            ``~/.cache/ryzenai-llm/<cache_name>``).
        intra_op_threads: onnxruntime's intra-op thread count (default: its own).
        max_shapes: sessions (and workers) kept open at once; default None: one per bucket.
        idle_timeout: seconds after which an unused session is closed (default
            :data:`DEFAULT_IDLE_TIMEOUT`); None keeps sessions until :meth:`close`.
    """

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
        provider: Literal["auto", "npu", "cpu"] = "auto",
        shapes: Literal["auto", "static", "dynamic"] = "auto",
        buckets: Sequence[int] | None = None,
        provider_options: dict[str, str] | None = None,
        isolation: Literal["process", "thread"] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        intra_op_threads: int | None = None,
        max_shapes: int | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self.package: P = package if isinstance(package, self.package_type) else self.package_type.open(package)
        self._settings: dict[str, Any] = {
            "provider": provider,
            "shapes": shapes,
            "buckets": buckets,
            "provider_options": provider_options,
            "isolation": isolation,
            "cache_dir": cache_dir,
            "intra_op_threads": intra_op_threads,
            "max_shapes": max_shapes,
            "idle_timeout": idle_timeout,
        }
        pkg = self.package
        if provider not in ("auto", "npu", "cpu"):
            raise InvalidRequestError(f"provider {provider!r} is not one of 'auto', 'npu', 'cpu'")
        if shapes not in ("auto", "static", "dynamic"):
            raise InvalidRequestError(f"shapes {shapes!r} is not one of 'auto', 'static', 'dynamic'")
        if isolation not in (None, "process", "thread"):
            raise InvalidRequestError(f"isolation {isolation!r} is not one of 'process', 'thread'")
        if max_shapes is not None and max_shapes < 1:
            raise InvalidRequestError(
                f"max_shapes is {max_shapes}; keep at least 1 session open, or pass None for one per bucket"
            )
        if idle_timeout is not None and idle_timeout <= 0:
            raise InvalidRequestError(
                f"idle_timeout is {idle_timeout}; pass a positive number of seconds, or None to keep sessions open"
            )
        ort = import_onnxruntime()
        _import_tokenizers()
        available = list(ort.get_available_providers())
        if provider == "npu" and NPU_PROVIDER not in available:
            raise RuntimeNotAvailableError(
                f"provider='npu' needs onnxruntime's {NPU_PROVIDER}, and this onnxruntime "
                f"{ort.__version__} has {available}. Run in the Ryzen AI environment (its onnxruntime-vitisai), "
                "or pass provider='cpu'"
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
        self.provider = NPU_PROVIDER if on_npu else CPU_PROVIDER
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
        self.isolation = isolation or ("process" if on_npu else "thread")
        self.provider_options = dict(provider_options or {})
        self.cache_dir = _cache_root(cache_dir, self.cache_name)
        self.intra_op_threads = intra_op_threads
        self.max_shapes = max_shapes
        self.idle_timeout = idle_timeout
        self._ort_version = str(ort.__version__)
        self._backends: dict[Shape, LocalBackend | WorkerBackend] = {}  # least recently used first
        self._leases: dict[Shape, int] = {}  # calls running on each shape's session now
        self._used: dict[Shape, float] = {}  # when each shape's session was last released
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._digest: str | None = None
        tokenizers = _import_tokenizers()
        self._tokenizer = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._truncating = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file))
        self._truncating.no_padding()
        self._truncating.enable_truncation(pkg.max_length, strategy=self.truncation)
        padding = tokenizers.Tokenizer.from_file(str(pkg.tokenizer_file)).padding
        if padding and isinstance(padding.get("pad_id"), int):
            self._pad_id: int = padding["pad_id"]
        else:  # BERT's and XLM-RoBERTa's pad tokens; padded positions are masked, so any id is exact
            ids = (self._tokenizer.token_to_id(t) for t in ("[PAD]", "<pad>"))
            self._pad_id = next((i for i in ids if i is not None), 0)

    @classmethod
    def get(cls, model: str | os.PathLike[str], **settings: Any) -> Self:
        """The shared engine for a folder, an embedded name or a Hugging Face repo id, and these settings."""
        from ..package.hub import resolve_model

        path = resolve_model(model, missing_hint=cls.missing_hint).resolve()
        opened = {name: settings.pop(name, None) for name in cls.package_options}
        given = inspect.signature(cls.__init__).bind(None, None, **settings)
        given.apply_defaults()  # the same engine whether a default is given or left out
        every = {k: v for k, v in given.arguments.items() if k not in ("self", "package")}
        plain = {k: tuple(v) if isinstance(v, list) else v for k, v in every.items() if k != "provider_options"}
        options = tuple(sorted((settings.get("provider_options") or {}).items()))
        key = (cls, str(path), tuple(opened.items()), tuple(sorted(plain.items())), options)
        with _ENGINES_LOCK:
            engine = _ENGINES.get(key)
            if engine is None:
                engine = cls(cls.package_type.open(path, **opened), **settings)
                _ENGINES[key] = engine
            return engine  # type: ignore[return-value]  # keyed by class

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
                "isolation": self.isolation,
                "max_shapes": self.max_shapes,
                "idle_timeout": self.idle_timeout,
            }
        )
        return out

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (empty with ``isolation="thread"``)."""
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
                backend = WorkerBackend(spec) if self.isolation == "process" else LocalBackend(spec)
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

    def _run_batch(self, batch: Batch, encodings: Sequence[Any]) -> np.ndarray:
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

    def _session_pooling(self) -> Pooling | None:
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
                self._digest = _file_digest(pkg.onnx_file)
            rows, seq = shape or (0, 0)
            vitis = {
                "cache_dir": str(self.cache_dir / "vitisai"),
                "cache_key": f"{pkg.name}-{self._digest[:16]}-{rows}x{seq}-ort{self._ort_version}",
            }
            vitis.update(self.provider_options)
            providers, options = (NPU_PROVIDER, CPU_PROVIDER), (vitis, {})
        return SessionSpec(
            onnx_file=str(model_file),
            providers=providers,
            provider_options=options,
            inputs=pkg.inputs,
            output=pkg.output,
            pooling=self._session_pooling(),
            intra_op_threads=self.intra_op_threads,
        )

    def _static_variant(self, rows: int, seq: int) -> Path:
        """The dynamic graph with its (batch, sequence) axes fixed, cached on disk."""
        if self._digest is None:
            self._digest = _file_digest(self.package.onnx_file)
        folder = self.cache_dir / "static" / f"{self.package.name}-{self._digest[:16]}"
        target = folder / f"model_{rows}x{seq}.onnx"
        if target.is_file():
            return target
        onnx = _import_onnx()
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

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass


def _close_idle(ref: weakref.ref[EncoderEngine[Any]]) -> None:
    engine = ref()  # the timer holds no strong reference: an engine nobody uses can be collected
    if engine is not None:
        engine._close_idle()


def _rebuild_engine(cls: type[EncoderEngine[Any]], package: Any, settings: dict[str, Any]) -> EncoderEngine[Any]:
    return cls(package, **settings)


def close_all() -> None:
    """Close every shared engine (tests, and programs that want their workers gone now)."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for engine in engines:
        engine.close()


class EmbeddingEngine(EncoderEngine[EmbeddingPackage]):
    """Runs one embedding folder: texts in, pooled and normalised vectors out.

    Sessions, shapes, providers and workers are :class:`EncoderEngine`'s (its arguments);
    share one engine per folder and settings with :meth:`get`.
    """

    package_type = EmbeddingPackage
    package_options = ("onnx_file", "pooling")

    # -- running -----------------------------------------------------------------------------

    def instruction(self, kind: Kind) -> str:
        """The package's default prefix for queries or documents."""
        return self.package.query_instruction if kind == "query" else self.package.document_instruction

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text before truncation (special tokens included)."""
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def embed(
        self,
        texts: Sequence[str],
        *,
        kind: Kind = "document",
        instruction: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 32,
        on_overflow: Literal["truncate", "error"] = "truncate",
        progress: Callable[[int], None] | None = None,
        blank: Literal["error", "embed"] = "error",
    ) -> EmbeddingResult:
        """Embed ``texts``.

        No texts give an empty result (a filter may have removed every document).

        Args:
            texts: the texts.
            kind: ``"query"`` or ``"document"``: picks the default instruction.
            instruction: prefix for every text (default: the package's for ``kind``).
            normalize: L2-normalise (default: the package's setting).
            batch_size: texts per run with dynamic shapes (static runs hold the graph's rows).
            on_overflow: ``"truncate"`` cuts texts longer than the maximum length (logged, and
                listed in :attr:`EmbeddingResult.truncated`); ``"error"`` raises instead.
            progress: called with the number of texts done after each run.
            blank: a text that is empty or only whitespace: ``"error"`` refuses it; ``"embed"``
                embeds it as the model's special tokens alone (what sentence-transformers gives
                such a text), with a warning naming it.

        Raises:
            InvalidRequestError: a text that is not a string, holds a lone surrogate or (with
                ``blank="error"``) is blank, a text over the maximum length with
                ``on_overflow="error"``, or a bad option.
            WorkerDiedError: the worker process died during the call; the next call starts a new one.
        """
        import numpy as np

        if blank not in ("error", "embed"):
            raise InvalidRequestError(f"blank {blank!r} is not one of 'error', 'embed'")
        items = self._check_texts(texts, blank=blank)
        if on_overflow not in ("truncate", "error"):
            raise InvalidRequestError(f"on_overflow {on_overflow!r} is not one of 'truncate', 'error'")
        if batch_size < 1:
            raise InvalidRequestError(f"batch_size is {batch_size}; it must be at least 1")
        if not items:
            return EmbeddingResult(vectors=[], tokens=[], truncated=[], padding=0, shapes=[])
        prefix = self.instruction(kind) if instruction is None else instruction
        full = [prefix + t for t in items]
        encodings = self._tokenizer.encode_batch(full)
        limit = self.package.max_length
        over = [i for i, e in enumerate(encodings) if len(e.ids) > limit]
        if over and on_overflow == "error":
            i = over[0]
            raise InvalidRequestError(
                f"text {i} is {len(encodings[i].ids)} tokens, over {self.package.name}'s maximum of {limit} "
                f"({self.package.max_length_source}); {len(over)} text(s) are too long. Split the text into "
                f"smaller chunks (e.g. a chunk size of {limit - 32} tokens), or pass on_overflow='truncate'"
            )
        if over:
            for i, enc in zip(over, self._truncating.encode_batch([full[i] for i in over]), strict=True):
                encodings[i] = enc
            log.warning(
                "%d of %d text(s) are longer than %s's maximum of %d tokens and were truncated (first: text %d); "
                "use smaller chunks to embed all of each text",
                len(over),
                len(items),
                self.package.name,
                limit,
                over[0],
            )
        lengths = [len(e.ids) for e in encodings]
        batches = plan_batches(
            lengths, batch_size=batch_size, buckets=self.buckets or None, static_rows=self.static_rows or None
        )
        out: list[np.ndarray | None] = [None] * len(items)
        padding, shapes, done = 0, [], 0
        for batch in batches:
            pooled = self._run_batch(batch, encodings)
            for row, i in enumerate(batch.indices):
                out[i] = pooled[row]
            padding += batch.rows * batch.length - sum(lengths[i] for i in batch.indices)
            shapes.append((batch.rows, batch.length))
            done += len(batch.indices)
            if progress is not None:
                progress(done)
        vectors = np.stack([v for v in out if v is not None])
        if normalize if normalize is not None else self.package.normalize:
            vectors = l2_normalize(vectors)
        as_lists: list[list[float]] = vectors.astype(np.float32).tolist()
        return EmbeddingResult(
            vectors=as_lists,
            tokens=lengths,
            truncated=over,
            padding=padding,
            shapes=shapes,
        )

    @staticmethod
    def _check_texts(texts: Sequence[str], *, blank: Literal["error", "embed"] = "error") -> list[str]:
        if isinstance(texts, str):
            raise InvalidRequestError(
                f"texts is one string ({texts[:40]!r}...); pass a list of strings (embed_query takes one text)"
            )
        items = list(texts)
        blanks = []
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise InvalidRequestError(f"text {i} is a {type(text).__name__}, not a string: pass strings only")
            check_prompt_text(text, f"text {i}")
            if not text.strip():
                if blank == "error":
                    raise InvalidRequestError(
                        f"text {i} is empty ({text!r}): an empty text has no meaning to embed; drop it before "
                        "embedding"
                    )
                blanks.append(i)
        if blanks:
            log.warning(
                "%d of %d text(s) are empty or only whitespace (first: text %d, %r) and were embedded as an empty "
                "text (the model's special tokens alone); drop blank texts before embedding to leave them out",
                len(blanks),
                len(items),
                blanks[0],
                items[blanks[0]],
            )
        return items

    def _session_pooling(self) -> Pooling | None:
        return self.package.pooling


class EncoderSettings(BaseModel):
    """What the framework faces take to choose and run an encoder (a pydantic mixin).

    Subclasses (:class:`EmbeddingSettings`, the reranker's) add their own fields and name
    their engine class; the faces declare these fields once by inheriting them.
    """

    engine_class: ClassVar[type[EncoderEngine[Any]]]

    model: str = Field(description="model folder, or Hugging Face repository id")
    provider: Literal["auto", "npu", "cpu"] = "auto"
    """``auto``: onnxruntime's VitisAI provider where installed, else the CPU."""
    shapes: Literal["auto", "static", "dynamic"] = "auto"
    """``auto``: static length buckets on the NPU (or for a static graph), dynamic shapes on the CPU."""
    buckets: list[int] | None = None
    """Sequence-length buckets for static shapes (default: the engine's, capped at the maximum length)."""
    provider_options: dict[str, str] | None = None
    """VitisAI provider options over the defaults (``cache_dir``, ``cache_key``, ``config_file`` ...)."""
    isolation: Literal["process", "thread"] | None = None
    """``process``: each session in a worker process (the NPU default); ``thread``: in this process."""
    onnx_file: str | None = None
    """The ONNX file in the folder when it ships several (``onnx/model_O4.onnx``)."""
    max_shapes: int | None = Field(default=None, ge=1)
    """Static shapes kept open at once, a session (on the NPU a worker) each; default: one per bucket."""
    idle_timeout: float | None = Field(default=DEFAULT_IDLE_TIMEOUT, gt=0)
    """Seconds after which an unused shape's session is closed (None: kept until the program ends)."""

    _engine: Any = PrivateAttr(default=None)

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
            "isolation": self.isolation,
            "onnx_file": self.onnx_file,
            "max_shapes": self.max_shapes,
            "idle_timeout": self.idle_timeout,
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
        blank: Literal["error", "embed"] = "error",
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
            blank=blank,
        )

    def engine_settings(self) -> dict[str, Any]:
        """The engine's settings, the pooling override among them."""
        return {**super().engine_settings(), "pooling": self.pooling}
