"""A cross-encoder folder read once: :class:`RerankPackage`.

A cross-encoder (``BertForSequenceClassification`` with one label such as
cross-encoder/ms-marco-MiniLM-L6-v2, ``XLMRobertaForSequenceClassification`` such as
BAAI/bge-reranker-base) reads a query and a passage together and gives one relevance logit.
:class:`RerankPackage` reads a folder as Hugging Face ships them (``config.json``,
``tokenizer.json``, ``onnx/model.onnx``) on top of what every encoder folder says
(:class:`~ryzenai_core.embeddings.folder.EncoderFolder`): the architecture, the logits output,
the number of labels and how a logit becomes a score. A model with two or more labels is a
classifier (NLI, duplicate questions), not a relevance model: it is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..embeddings.folder import EncoderFolder, EncoderPackage
from ..errors import InvalidRequestError, UnsupportedModelError

__all__ = ["Activation", "RerankPackage", "is_rerank_folder"]

_EXAMPLES = "cross-encoder/ms-marco-MiniLM-L6-v2 or BAAI/bge-reranker-base"

Activation = Literal["sigmoid", "identity"]


def is_rerank_folder(path: str | os.PathLike[str]) -> bool:
    """True for a folder that holds an ONNX ``*ForSequenceClassification`` model (a cross-encoder)."""
    folder = Path(path)
    config = folder / "config.json"
    if not folder.is_dir() or (folder / "genai_config.json").is_file() or not config.is_file():
        return False
    if not (any(folder.glob("*.onnx")) or any(folder.glob("onnx/*.onnx"))):
        return False
    try:
        import json

        architectures = json.loads(config.read_text(encoding="utf-8-sig")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False
    return any(str(a).endswith("ForSequenceClassification") for a in architectures)


def _labels(config: dict[str, Any]) -> tuple[int | None, str]:
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label), f"config.json id2label {dict(id2label)}"
    if isinstance(config.get("num_labels"), int):
        return config["num_labels"], "config.json num_labels"
    return None, ""


def _activation(config: dict[str, Any], given: Activation | None) -> tuple[Activation, str]:
    if given is not None:
        if given not in ("sigmoid", "identity"):
            raise InvalidRequestError(f"activation {given!r} is not one of 'sigmoid', 'identity'")
        return given, "given"
    st = config.get("sentence_transformers")
    named = st.get("activation_fn") if isinstance(st, dict) else None
    source = "config.json sentence_transformers.activation_fn"
    if named is None and config.get("sbert_ce_default_activation_function"):  # sentence-transformers < 4
        named = config["sbert_ce_default_activation_function"]
        source = "config.json sbert_ce_default_activation_function"
    if named is None:
        return "sigmoid", "default: sigmoid, as CrossEncoder.predict for a one-label model"
    if str(named).endswith(".Sigmoid"):
        return "sigmoid", source
    if str(named).endswith(".Identity"):
        return "identity", source
    raise UnsupportedModelError(
        f"{source} is {named!r}; the reranker applies a sigmoid or nothing (identity) to the logit. Pass "
        "activation='sigmoid' or activation='identity', whichever fits the model's scores"
    )


@dataclass(frozen=True, kw_only=True)
class RerankPackage(EncoderPackage):
    """A cross-encoder folder, read once.

    The fields every encoder has are :class:`~ryzenai_core.embeddings.folder.EncoderPackage`'s.

    Attributes:
        output: the graph output holding the logits.
        architecture: ``config.json``'s architecture (``BertForSequenceClassification``), if any.
        model_type: ``config.json``'s model_type, if any.
        activation: ``"sigmoid"`` or ``"identity"``: how a logit becomes a score.
        activation_source: where ``activation`` came from.
    """

    architecture: str | None
    model_type: str | None
    activation: Activation
    activation_source: str

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, onnx_file: str | None = None, activation: Activation | None = None
    ) -> RerankPackage:
        """Read a cross-encoder folder: a sequence-classification model with one label.

        Args:
            path: the cross-encoder's folder.
            onnx_file: the ONNX file inside it, when the folder ships several (``onnx/model_O4.onnx``).
            activation: override how logits become scores (``"sigmoid"`` or ``"identity"``).

        Raises:
            UnsupportedModelError: not a sequence-classification model, more than one label, or
                a graph without a logits output.
            ModelPackageError: what :meth:`EncoderFolder.read` raises (no folder, ONNX model or
                tokenizer; an LFS pointer; no usable maximum length).
        """
        base = EncoderFolder.read(
            path, onnx_file=onnx_file, what="reranker", task="text-classification", example=_EXAMPLES.split()[0]
        )
        config = base.config
        architectures = [str(a) for a in config.get("architectures") or []]
        if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise UnsupportedModelError(
                f"{base.name} is a {architectures[0]} (config.json architectures), not a cross-encoder: a reranker "
                f"is a *ForSequenceClassification model with one label, such as {_EXAMPLES}. An embedding model "
                "goes to RyzenAIEmbeddings / RyzenAIEmbedding instead",
                path=base.path,
            )
        outputs = base.outputs
        model_file = base.onnx_file
        rank2 = [n for n, d in outputs.items() if len(d) == 2]
        output = "logits" if "logits" in outputs else (rank2[0] if len(rank2) == 1 else None)
        if output is None:
            shown = ", ".join(f"{n} {d}" for n, d in outputs.items())
            raise UnsupportedModelError(
                f"{model_file.name} has outputs {shown}: none is the logits (batch, labels) of a cross-encoder. "
                "Export the model with optimum's text-classification task",
                path=model_file,
            )
        labels, labels_source = _labels(config)
        width = outputs[output][-1] if outputs[output] else None
        if isinstance(width, int) and width > 0:
            labels, labels_source = width, f"the graph's {output} {outputs[output]}"
        if labels is not None and labels != 1:
            raise UnsupportedModelError(
                f"{base.name} has {labels} labels ({labels_source}): it is a classifier, not a relevance model. A "
                "reranker needs one relevance logit per (query, passage) pair; a classifier's logits are per class "
                f"and rank nothing. Use a one-label cross-encoder such as {_EXAMPLES}",
                path=base.path,
            )
        chosen, activation_source = _activation(config, activation)
        return cls(
            **base.package_fields(),
            output=output,
            architecture=architectures[0] if architectures else None,
            model_type=config.get("model_type"),
            activation=chosen,
            activation_source=activation_source,
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (``ryzenai-llm info`` on a reranker folder)."""
        return {
            **self._description("reranker"),
            "architecture": self.architecture,
            "model_type": self.model_type,
            "activation": self.activation,
            "activation_source": self.activation_source,
        }
