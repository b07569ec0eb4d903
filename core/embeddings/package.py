"""An embedding model folder read once: :class:`EmbeddingPackage`.

An embedding folder is what Hugging Face ships for sentence-transformers models
(``onnx/model.onnx``, ``tokenizer.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``, ``modules.json``) or what AMD's NPU examples export (one
``model.onnx`` with a static ``(1, 512)`` shape beside the tokenizer). On top of what every
encoder folder says (:class:`~ryzenai_core.embeddings.folder.EncoderFolder`) it reads the
pooling (CLS or mean), the Dense layers after it (:mod:`.modules`: in the graph when it has a
``sentence_embedding`` output, else on the host), whether vectors are normalised, the output the
engine reads, the query and document prompts (``config_sentence_transformers.json``; BGE's query
instruction for BGE English models) and the Matryoshka dimensions the model was trained for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidRequestError, UnsupportedModelError
from .folder import EncoderFolder, EncoderPackage, json_or_none
from .modules import APPLIED_MODULES, DenseLayer, matryoshka_dims, module_kind, prompts, read_dense_layers
from .runner import Pooling

__all__ = ["BGE_QUERY_INSTRUCTION", "EmbeddingPackage", "is_embedding_folder"]

#: BGE English v1.5's query instruction (its model card); documents get none.
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_HIDDEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
#: The graph output that holds the whole sentence-transformers pipeline's vector (pooled, Dense, normalised).
SENTENCE_EMBEDDING = "sentence_embedding"


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
        output: the graph output the engine reads: per-token hidden states, or the graph's
            ``sentence_embedding`` (the whole pipeline in the graph: ``pooled_in_graph``).
        pooling: ``"cls"`` or ``"mean"``; ``pooling_source`` says where it came from.
        normalize: L2-normalise vectors by default (sentence-transformers' Normalize module).
        dims: vector size, when the graph (or the last Dense layer) says it.
        query_instruction: prefix for queries (the model's query prompt; BGE's for BGE English
            models; else empty); ``prompts_source`` says where the prompts came from.
        document_instruction: prefix for documents (the model's document prompt, else empty).
        model_type: ``config.json``'s model_type, if any.
        pooled_in_graph: the graph pools (and applies the Dense layers): sessions return vectors.
        dense: Dense layers the host applies after pooling (when the graph does not).
        matryoshka_dims: the sizes the vectors may be cut to (largest first; empty when the model
            was not trained for it); ``matryoshka_source`` says how the model declares them.
    """

    pooling: Pooling
    pooling_source: str
    normalize: bool
    dims: int | None
    query_instruction: str = ""
    document_instruction: str = ""
    model_type: str | None = None
    pooled_in_graph: bool = False
    dense: tuple[DenseLayer, ...] = ()
    matryoshka_dims: tuple[int, ...] = ()
    matryoshka_source: str = ""
    prompts_source: str = ""

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
            UnsupportedModelError: no per-token output for the pooling; modules.json modules the
                engine cannot apply (neither in the graph nor on the host: see :mod:`.modules`).
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
            modes = [
                k.removeprefix("pooling_mode_").removesuffix("_token")
                for k, v in pool_cfg.items()
                if k.startswith("pooling_mode_") and v is True
            ]
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
        modules = [m for m in modules if isinstance(m, dict)] if isinstance(modules, list) else None
        normalize = True if modules is None else any(module_kind(m) == "Normalize" for m in modules)
        after = [m for m in modules or [] if module_kind(m) not in ("Transformer", "Pooling", "Normalize")]
        outputs = base.outputs
        model_file = base.onnx_file
        whole = outputs.get(SENTENCE_EMBEDDING)
        dense: tuple[DenseLayer, ...] = ()
        if pooling is None and whole is not None and len(whole) == 2:
            # The graph runs the whole pipeline (onnx-community's EmbeddingGemma export): its vector is the model's.
            output, in_graph = SENTENCE_EMBEDDING, True
            width = whole[-1]
        else:
            unapplied = [
                f"{m.get('path') or m.get('name')} ({module_kind(m)})"
                for m in after
                if module_kind(m) not in APPLIED_MODULES
            ]
            if unapplied:
                raise UnsupportedModelError(
                    f"{folder.name}'s modules.json runs {', '.join(unapplied)} besides pooling, Dense layers and "
                    "normalisation; this engine does not apply them, so its vectors would not be the model's. Export "
                    f"the model with the whole pipeline in the graph (a {SENTENCE_EMBEDDING} output), or use a model "
                    "without such modules",
                    path=folder / "modules.json",
                )
            dense, in_graph = read_dense_layers(folder, after), False
            named = [n for n in _HIDDEN_OUTPUTS if n in outputs]
            rank3 = [n for n, d in outputs.items() if len(d) == 3]
            if not named and not rank3:
                shown = ", ".join(f"{n} {d}" for n, d in outputs.items())
                raise UnsupportedModelError(
                    f"{model_file.name} has outputs {shown}: none is per-token hidden states (batch, sequence, "
                    f"hidden), which {chosen} pooling needs. Export last_hidden_state (optimum's feature-extraction "
                    "task)",
                    path=model_file,
                )
            output = (named or rank3)[0]
            width = dense[-1].out_features if dense else (outputs[output][-1] if len(outputs[output]) == 3 else None)
        config = base.config
        dims = width if isinstance(width, int) and width > 0 else (None if dense else config.get("hidden_size"))
        ident = " ".join(str(x) for x in (base.name, config.get("_name_or_path", ""))).lower()
        bge_en = "bge" in ident and not any(tag in ident for tag in ("-zh", "m3", "multilingual"))
        query, document, prompts_source = prompts(folder)
        if query is None and bge_en:
            query, prompts_source = BGE_QUERY_INSTRUCTION, prompts_source or "BGE English's query instruction"
        sizes, sizes_source = matryoshka_dims(folder, ident, dims)
        return cls(
            **base.package_fields(),
            output=output,
            pooling=chosen,
            pooling_source=pooling_source,
            normalize=normalize,
            dims=dims,
            query_instruction=query or "",
            document_instruction=document or "",
            model_type=config.get("model_type"),
            pooled_in_graph=in_graph,
            dense=dense,
            matryoshka_dims=sizes,
            matryoshka_source=sizes_source,
            prompts_source=prompts_source,
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
            "prompts_source": self.prompts_source or None,
            "pipeline": (
                f"the graph's {SENTENCE_EMBEDDING} (pooling, Dense layers, normalisation in the graph)"
                if self.pooled_in_graph
                else " -> ".join(
                    [f"{self.pooling} pooling", *(f"{d.path} (Dense)" for d in self.dense)]
                    + (["normalise"] if self.normalize else [])
                )
            ),
            "matryoshka_dims": list(self.matryoshka_dims) or None,
            "matryoshka_source": self.matryoshka_source or None,
        }
