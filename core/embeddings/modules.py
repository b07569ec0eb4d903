"""What a sentence-transformers folder asks for around the encoder: modules, Dense layers, prompts, dimensions.

A sentence-transformers model is a list of modules (``modules.json``): the Transformer, then
Pooling, and for some models Dense layers (EmbeddingGemma: 768 -> 3072 -> 768) and Normalize.
The engine runs the Transformer in onnxruntime and the rest either in the graph (an export whose
``sentence_embedding`` output is the whole pipeline, as onnx-community's EmbeddingGemma has it)
or on the host: pooling in the session, then :class:`DenseLayer` s in numpy (their weights
read from each module's ``model.safetensors``), then L2 normalisation.

It also reads the model's query and document prompts (``config_sentence_transformers.json``)
and the Matryoshka dimensions a model was trained for (:func:`matryoshka_dims`), the sizes its
vectors may be cut to.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import RuntimeNotAvailableError, UnsupportedModelError
from .folder import json_or_none

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "APPLIED_MODULES",
    "KNOWN_MATRYOSHKA",
    "DenseLayer",
    "matryoshka_dims",
    "module_kind",
    "prompts",
    "read_dense_layers",
]

#: The sentence-transformers modules the engine applies (on the host or through the graph).
APPLIED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
#: Models trained for Matryoshka truncation, by a name their folder or repository carries, with
#: their dimensions as their model cards give them (largest first: the full vector).
KNOWN_MATRYOSHKA: dict[str, tuple[int, ...]] = {
    "embeddinggemma": (768, 512, 256, 128),
    "nomic-embed-text-v1.5": (768, 512, 256, 128, 64),
}
#: sentence-transformers' model card names the dimensions of a model trained with MatryoshkaLoss.
_CARD_DIMS = re.compile(r'"matryoshka_dims"\s*:\s*\[\s*([0-9][0-9,\s]*)\]')
_ACTIVATIONS = {"Identity": "identity", "Tanh": "tanh"}


def module_kind(module: dict[str, Any]) -> str:
    """A module's class name (``sentence_transformers.models.Dense`` and version 6's longer paths: ``Dense``)."""
    return str(module.get("type", "")).rsplit(".", 1)[-1]


@dataclass(frozen=True, eq=False)
class DenseLayer:
    """One sentence-transformers Dense module: ``activation(x @ weight.T + bias)``."""

    path: str
    weight: np.ndarray
    bias: np.ndarray | None
    activation: Literal["identity", "tanh"]

    @property
    def out_features(self) -> int:
        """The size of its output."""
        return int(self.weight.shape[0])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The layer's output for rows of vectors ``x``."""
        import numpy as np

        y = x @ self.weight.T
        if self.bias is not None:
            y = y + self.bias
        return np.asarray(np.tanh(y) if self.activation == "tanh" else y, dtype=np.float32)


def read_dense_layers(folder: Path, modules: list[dict[str, Any]]) -> tuple[DenseLayer, ...]:
    """The Dense modules of ``modules.json``, in order, with their weights.

    Raises:
        UnsupportedModelError: a Dense module whose activation is not Identity or Tanh, or whose
            weights are not in a ``model.safetensors`` (a ``pytorch_model.bin`` needs torch).
        RuntimeNotAvailableError: the ``safetensors`` package is missing.
    """
    import numpy as np

    layers = []
    for module in modules:
        if module_kind(module) != "Dense":
            continue
        sub = folder / str(module.get("path", ""))
        config = json_or_none(sub / "config.json", "Dense module config") or {}
        named = str(config.get("activation_function") or "torch.nn.modules.activation.Tanh")  # the module's default
        activation = _ACTIVATIONS.get(named.rsplit(".", 1)[-1])
        if activation is None:
            raise UnsupportedModelError(
                f"{sub.name}/config.json's activation_function is {named!r}; the engine applies Identity and Tanh. "
                "Export the model with the whole pipeline in the graph (a sentence_embedding output)",
                path=sub / "config.json",
            )
        weights = sub / "model.safetensors"
        if not weights.is_file():
            raise UnsupportedModelError(
                f"{sub.name} has no model.safetensors (its weights); the engine reads Dense weights from safetensors "
                "(a pytorch_model.bin needs torch). Save the model again with sentence-transformers >= 3, or export "
                "it with the whole pipeline in the graph (a sentence_embedding output)",
                path=sub,
            )
        tensors = _load_safetensors(weights)
        weight = tensors.get("linear.weight")
        if weight is None or weight.ndim != 2:
            raise UnsupportedModelError(
                f"{sub.name}/model.safetensors has no linear.weight matrix (tensors: {sorted(tensors)})", path=weights
            )
        bias = tensors.get("linear.bias")
        layers.append(
            DenseLayer(
                path=sub.name,
                weight=np.asarray(weight, dtype=np.float32),
                bias=None if bias is None else np.asarray(bias, dtype=np.float32),
                activation=activation,  # type: ignore[arg-type]
            )
        )
    return tuple(layers)


def _load_safetensors(path: Path) -> dict[str, Any]:
    try:
        numpy_loader = importlib.import_module("safetensors.numpy")
    except ImportError as exc:
        raise RuntimeNotAvailableError(
            f"{path.parent.name}'s Dense weights are a safetensors file, and the `safetensors` package is not "
            f"installed ({exc}). Install it with pip install 'ryzenai-llm[embeddings]'"
        ) from exc
    loaded: dict[str, Any] = numpy_loader.load_file(str(path))
    return loaded


def prompts(folder: Path) -> tuple[str | None, str | None, str]:
    """The query and document prompts of ``config_sentence_transformers.json`` (None where absent), and the source.

    The document prompt is ``document`` (EmbeddingGemma), else ``passage`` (E5's naming).
    """
    config = json_or_none(folder / "config_sentence_transformers.json", "sentence-transformers config") or {}
    found = config.get("prompts") if isinstance(config, dict) else None
    if not isinstance(found, dict):
        return None, None, ""
    query = found.get("query")
    document = found.get("document", found.get("passage"))
    return (
        query if isinstance(query, str) else None,
        document if isinstance(document, str) else None,
        "config_sentence_transformers.json prompts",
    )


def matryoshka_dims(folder: Path, ident: str, dims: int | None) -> tuple[tuple[int, ...], str]:
    """The vector sizes a model was trained to be cut to (largest first), and where that was read.

    A model says so in one of two ways: its README.md is sentence-transformers' model card of a
    model trained with MatryoshkaLoss (``"matryoshka_dims": [768, 512, ...]``); or its name (the
    folder's, the repository's, or config.json's ``_name_or_path``, in ``ident``) is one of
    :data:`KNOWN_MATRYOSHKA` and its vectors have that model's full size. Otherwise none: the
    model was not trained for it, and cutting its vectors would lose what they mean.
    """
    if not dims:
        return (), ""
    readme = folder / "README.md"
    try:
        card = readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else ""
    except OSError:
        card = ""
    match = _CARD_DIMS.search(card)
    if match:
        numbers = {int(n) for n in match.group(1).replace(",", " ").split()}
        declared = sorted((n for n in numbers if 0 < n <= dims), reverse=True)
        if declared:
            return tuple(declared), "README.md (sentence-transformers' MatryoshkaLoss matryoshka_dims)"
    low = ident.lower()
    for name, sizes in KNOWN_MATRYOSHKA.items():
        if name in low and sizes[0] == dims:
            return sizes, f"known model ({name}: its model card)"
    return (), ""
