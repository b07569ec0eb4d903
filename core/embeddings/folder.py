"""An ONNX encoder folder read once: what embedding models and rerankers share.

:class:`EncoderFolder` finds the ONNX model (``onnx/model.onnx``, ``model.onnx`` or the one
``*.onnx``), checks ``tokenizer.json`` and Git LFS pointers, reads ``config.json`` and
``tokenizer_config.json``, the graph's inputs and outputs (without its weights) and the longest
input the configs allow; :class:`EncoderPackage` is what an embedding package and a reranker
package both keep of it (and describe alike). ``tokenizers`` and ``onnx`` are imported only here, when a folder is
read or a model loaded (:func:`import_tokenizers`, :func:`import_onnx`); they come with the
``embeddings`` extra.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

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
from ..package.hub import package_name
from ..package.scan import is_lfs_pointer, read_json

__all__ = ["EncoderFolder", "import_onnx", "import_tokenizers", "json_or_none"]

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_EXTRA = "pip install 'ryzenai-llm[embeddings]'"


def _import(module: str, why: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeNotAvailableError(f"{why} ({exc}). Install it with {_EXTRA}") from exc


def import_tokenizers() -> Any:
    """Hugging Face's ``tokenizers`` (the ``embeddings`` extra), or :class:`RuntimeNotAvailableError`."""
    return _import("tokenizers", "embedding models need Hugging Face's `tokenizers` package")


def import_onnx() -> Any:
    """The ``onnx`` package (the ``embeddings`` extra), or :class:`RuntimeNotAvailableError`."""
    return _import("onnx", "reading an embedding model's graph needs the `onnx` package")


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


def json_or_none(path: Path, what: str) -> Any:
    """A folder's JSON file, or None when it is absent (see :func:`~ryzenai_core.package.folder.read_json`)."""
    return read_json(path, what) if path.is_file() else None


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
            if is_lfs_pointer(f):
                raise LfsPointerError(
                    f"{f.relative_to(folder)} is a Git LFS pointer, not its content: run `git lfs pull` in {folder}",
                    path=f,
                )
        config = json_or_none(folder / "config.json", "model config") or {}
        tok_config = json_or_none(folder / "tokenizer_config.json", "tokenizer config") or {}

        onnx = import_onnx()
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
        static = (ids_dims[0], ids_dims[1]) if isinstance(ids_dims[0], int) and isinstance(ids_dims[1], int) else None

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

    def package_fields(self) -> dict[str, Any]:
        """The fields of :class:`EncoderPackage` this folder gives (all but ``output``, the package's choice)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(EncoderPackage) if f.name != "output"}


@dataclass(frozen=True, kw_only=True)
class EncoderPackage:
    """What an embedding model's and a reranker's package both hold: the folder's files and graph.

    Attributes:
        path: the folder.
        name: its name (a Hugging Face cache snapshot is named by its repository).
        onnx_file: the ONNX model that runs.
        tokenizer_file: ``tokenizer.json``.
        max_length: the longest input in tokens (special tokens included).
        max_length_source: which file set ``max_length``.
        static_shape: ``(rows, sequence)`` when the graph's inputs have fixed sizes (AMD's
            exports), else None (dynamic axes).
        inputs: the graph's inputs this engine feeds (input_ids, attention_mask, token_type_ids).
        output: the graph output the engine reads.
        fixed_rows: the graph's batch size when it is fixed (with a dynamic sequence axis too).
        outputs: every graph output with its dimensions.
    """

    path: Path
    name: str
    onnx_file: Path
    tokenizer_file: Path
    max_length: int
    max_length_source: str
    static_shape: tuple[int, int] | None
    inputs: tuple[str, ...]
    output: str
    fixed_rows: int | None = None
    outputs: dict[str, list[int | str | None]] = field(default_factory=dict)

    def _description(self, kind: str) -> dict[str, Any]:
        """The part of :meth:`describe` every encoder package has (``ryzenai-llm info``)."""
        return {
            "kind": kind,
            "name": self.name,
            "path": str(self.path),
            "onnx_file": str(self.onnx_file.relative_to(self.path)),
            "max_length": self.max_length,
            "max_length_source": self.max_length_source,
            "shapes": "static" if self.static_shape else "dynamic",
            "static_shape": list(self.static_shape) if self.static_shape else None,
            "inputs": list(self.inputs),
            "output": self.output,
        }
