"""An embedding model folder read once: :class:`EmbeddingPackage`.

An embedding folder is what Hugging Face ships for sentence-transformers models
(``onnx/model.onnx``, ``tokenizer.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``, ``modules.json``) or what AMD's NPU examples export (one
``model.onnx`` with a static ``(1, 512)`` shape beside the tokenizer). On top of what every
encoder folder says (:class:`~ryzenai_core.embeddings.folder.EncoderFolder`) it reads the
pooling (CLS or mean), whether vectors are normalised, the output that holds per-token hidden
states and the query instruction (BGE's for BGE English models).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidRequestError, UnsupportedModelError
from .folder import EncoderFolder, EncoderPackage, json_or_none
from .runner import Pooling

__all__ = ["BGE_QUERY_INSTRUCTION", "EmbeddingPackage", "is_embedding_folder"]

#: BGE English v1.5's query instruction (its model card); documents get none.
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_HIDDEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
#: The sentence-transformers modules this engine applies (any other changes the vectors: Dense...).
_APPLIED_MODULES = ("Transformer", "Pooling", "Normalize")


def is_embedding_folder(path: str | os.PathLike[str]) -> bool:
    """True for a folder that looks like an embedding model rather than an LLM package."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "genai_config.json").is_file():
        return False
    has_onnx = any(folder.glob("*.onnx")) or any(folder.glob("onnx/*.onnx"))
    return has_onnx and ((folder / "modules.json").is_file() or (folder / "tokenizer.json").is_file())


def _pooling_config(folder: Path) -> tuple[Path | None, Any]:
    modules = json_or_none(folder / "modules.json", "sentence-transformers module list")
    if isinstance(modules, list):
        for module in modules:
            if isinstance(module, dict) and str(module.get("type", "")).endswith("Pooling"):
                path = folder / str(module.get("path", "1_Pooling")) / "config.json"
                return path, json_or_none(path, "pooling config")
    path = folder / "1_Pooling" / "config.json"
    return path, json_or_none(path, "pooling config")


@dataclass(frozen=True, kw_only=True)
class EmbeddingPackage(EncoderPackage):
    """An embedding model folder, read once.

    The fields every encoder has are :class:`.folder.EncoderPackage`'s.

    Attributes:
        output: the graph output that holds per-token hidden states.
        pooling: ``"cls"`` or ``"mean"``; ``pooling_source`` says where it came from.
        normalize: L2-normalise vectors by default (sentence-transformers' Normalize module).
        dims: vector size, when the graph says it.
        query_instruction: prefix for queries (BGE's for BGE models, else empty).
        document_instruction: prefix for documents.
        model_type: ``config.json``'s model_type, if any.
    """

    pooling: Pooling
    pooling_source: str
    normalize: bool
    dims: int | None
    query_instruction: str = ""
    document_instruction: str = ""
    model_type: str | None = None

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, onnx_file: str | None = None, pooling: Pooling | None = None
    ) -> EmbeddingPackage:
        """Read an embedding model's folder.

        Args:
            path: the folder, as sentence-transformers save one or as AMD's NPU examples export one.
            onnx_file: the ONNX file inside it, when the folder ships several (``onnx/model_O4.onnx``).
            pooling: override the folder's pooling (``"cls"`` or ``"mean"``).

        Raises:
            InvalidRequestError: a ``pooling`` other than ``"cls"`` or ``"mean"``.
            UnsupportedModelError: no per-token output for the pooling.
            ConfigError: a pooling mode in the configs that cannot be used.
            ModelPackageError: what :meth:`EncoderFolder.read` raises (no folder, ONNX model or
                tokenizer; an LFS pointer; inputs this engine cannot feed; no usable maximum length).
        """
        folder = Path(path).expanduser()
        st_config = json_or_none(folder / "sentence_bert_config.json", "sentence-transformers config") or {}
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
            if not modes and isinstance(pool_cfg.get("pooling_mode"), str):  # sentence-transformers 6's layout
                modes = [pool_cfg["pooling_mode"]]
            if modes not in (["cls"], ["mean"]):
                raise ConfigError(
                    f"{pool_path.relative_to(folder)} asks for pooling {modes or 'none'}; this engine pools "
                    "'cls' or 'mean': pass pooling='cls' or pooling='mean' if one of them fits the model",
                    path=pool_path,
                )
            chosen, pooling_source = ("cls" if modes == ["cls"] else "mean"), str(pool_path.relative_to(folder))
        else:
            chosen, pooling_source = "cls", "default: CLS, as BERT/BGE exports use (no 1_Pooling/config.json)"

        modules = json_or_none(folder / "modules.json", "sentence-transformers module list")
        if isinstance(modules, list):
            normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
            unapplied = [
                f"{m.get('path') or m.get('name')} ({str(m.get('type', '')).rsplit('.', 1)[-1]})"
                for m in modules
                if isinstance(m, dict) and str(m.get("type", "")).rsplit(".", 1)[-1] not in _APPLIED_MODULES
            ]
            if unapplied:
                raise UnsupportedModelError(
                    f"{folder.name}'s modules.json runs {', '.join(unapplied)} besides pooling and normalisation; "
                    "this engine does not apply them, so its vectors would not be the model's (EmbeddingGemma's "
                    "Dense layers, for one). Use a model without such modules",
                    path=folder / "modules.json",
                )
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
            **base.package_fields(),
            output=output,
            pooling=chosen,
            pooling_source=pooling_source,
            normalize=normalize,
            dims=hidden if isinstance(hidden, int) and hidden > 0 else config.get("hidden_size"),
            query_instruction=BGE_QUERY_INSTRUCTION if bge_en else "",
            document_instruction="",
            model_type=config.get("model_type"),
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (``ryzenai-llm info`` on an embedding folder)."""
        return {
            **self._description("embedding"),
            "model_type": self.model_type,
            "dims": self.dims,
            "pooling": self.pooling,
            "pooling_source": self.pooling_source,
            "normalize": self.normalize,
            "query_instruction": self.query_instruction,
            "document_instruction": self.document_instruction,
        }
