"""What a model folder is when it is none of the layouts the plugin runs, and what it lacks.

The plugin runs three layouts: an onnxruntime-genai LLM package (``genai_config.json``), an ONNX
embedding folder and an ONNX cross-encoder (:mod:`.package`, :mod:`ryzenai_core.rerank.package`).
A folder that is none of them (Hugging Face weights without an ONNX export, an encoder packaged
for onnxruntime-genai, as AMD's NPU EmbeddingGemma package may be) gets :func:`describe_layout`:
its files, what it looks like, and what is missing for the layout it comes closest to, so that
``ryzenai-llm info`` and ``doctor`` say that instead of the first check that failed. An encoder
in onnxruntime-genai's layout is read as an embedding folder first (its ONNX graph and
``tokenizer.json`` may be all the engine needs); only when that fails is it described here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FolderLayout", "describe_layout", "is_encoder_in_genai_layout"]

_DECODERS = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")
_NPU_FILES = ("*.xclbin", "dd_metastate_*", "*.rai", "*_ctx.onnx")


def _config(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _architectures(config: dict[str, Any]) -> list[str]:
    return [str(a) for a in config.get("architectures") or [] if isinstance(a, str)]


def is_encoder_in_genai_layout(path: str | os.PathLike[str]) -> bool:
    """A folder with ``genai_config.json`` whose model is an encoder (an embedding model), not a decoder.

    Its ``config.json`` names architectures and none is a decoder (``*ForCausalLM`` ...), or its
    name says it embeds and nothing says it decodes.
    """
    folder = Path(path)
    if not (folder / "genai_config.json").is_file():
        return False
    architectures = _architectures(_config(folder))
    if architectures:
        return not any(a.endswith(_DECODERS) for a in architectures)
    return "embed" in folder.name.lower()


@dataclass(frozen=True)
class FolderLayout:
    """A folder's files and what they add up to.

    Attributes:
        path: the folder.
        looks_like: what it seems to be, in words.
        files: what was found, by kind (``onnx``, ``tokenizer``, ``config`` ...).
        missing: what the closest layout the plugin runs needs and the folder lacks.
        hint: what to do.
        error: why reading it as that layout failed, when it was tried.
    """

    path: Path
    looks_like: str
    files: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    hint: str = ""
    error: str = ""

    def describe(self) -> dict[str, Any]:
        """A JSON-ready view (``info --json``)."""
        return {
            "kind": "unknown",
            "path": str(self.path),
            "looks_like": self.looks_like,
            "files": dict(self.files),
            "missing": list(self.missing),
            "hint": self.hint,
            "error": self.error or None,
        }

    def rows(self) -> list[tuple[str, str]]:
        """The rows ``info`` prints."""
        out = [("folder", str(self.path)), ("looks like", self.looks_like)]
        out += [(k, v) for k, v in self.files.items()]
        out.append(("missing", "; ".join(self.missing) if self.missing else "nothing the closest layout needs"))
        if self.error:
            out.append(("read as one", self.error))
        if self.hint:
            out.append(("to use it", self.hint))
        return out


def _onnx_inputs(path: Path) -> list[str] | None:
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not installed, or not an ONNX file: the listing says what it can
        return None
    initializers = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def describe_layout(path: str | os.PathLike[str], error: str = "") -> FolderLayout:
    """What a folder that is no layout the plugin runs holds, what it looks like, and what it lacks.

    ``error`` is why reading it as the closest layout failed, when that was tried.
    """
    folder = Path(path)
    if not folder.is_dir():
        return FolderLayout(folder, "nothing: the folder does not exist", missing=["the folder"])
    config = _config(folder)
    architectures = _architectures(config)
    onnx_files = sorted({*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")})
    files: dict[str, str] = {}
    if onnx_files:
        shown = []
        for f in onnx_files[:4]:
            inputs = _onnx_inputs(f)
            said = "" if inputs is None else f" (inputs {', '.join(inputs)})" if inputs else " (no inputs)"
            shown.append(f"{f.relative_to(folder)}{said}")
        more = f" and {len(onnx_files) - 4} more" if len(onnx_files) > 4 else ""
        files["onnx models"] = "; ".join(shown) + more
    else:
        files["onnx models"] = "none"
    tokenizer = [n for n in ("tokenizer.json", "tokenizer.model", "vocab.txt") if (folder / n).is_file()]
    files["tokenizer"] = ", ".join(tokenizer) or "none"
    if config:
        kind = config.get("model_type") or "no model_type"
        files["config.json"] = f"{kind}; architectures {', '.join(architectures) or 'none'}"
    layout_files = ("genai_config.json", "modules.json", "config_sentence_transformers.json")
    markers = [n for n in layout_files if (folder / n).is_file()]
    if markers:
        files["layout files"] = ", ".join(markers)
    weights = sorted({p.name for pattern in _WEIGHTS for p in folder.glob(pattern)})
    if weights:
        files["weights"] = ", ".join(weights[:4]) + (f" and {len(weights) - 4} more" if len(weights) > 4 else "")
    npu = sorted({p.name for pattern in _NPU_FILES for p in folder.glob(pattern)})
    if npu:
        files["NPU files"] = ", ".join(npu[:4]) + (f" and {len(npu) - 4} more" if len(npu) > 4 else "")

    genai = (folder / "genai_config.json").is_file()
    decoder = any(a.endswith(_DECODERS) for a in architectures)
    cross = any(a.endswith("ForSequenceClassification") for a in architectures)
    missing: list[str] = []
    if genai and not decoder:
        looks = (
            "an encoder (embedding model) packaged for onnxruntime-genai (genai_config.json), as AMD's NPU "
            "EmbeddingGemma package may be: onnxruntime-genai runs decoders, and the embedding engine reads ONNX "
            "encoder folders"
        )
        if not onnx_files:
            missing.append("an ONNX encoder graph with inputs input_ids and attention_mask")
        if "tokenizer.json" not in tokenizer:
            missing.append("tokenizer.json (Hugging Face's fast tokenizer file)")
        hint = (
            "the embedding engine reads such a folder when its ONNX graph takes input_ids and attention_mask "
            "beside tokenizer.json; otherwise use the model's ONNX export (for EmbeddingGemma, "
            "onnx-community/embeddinggemma-300m-ONNX), which runs on the NPU through the VitisAI EP"
        )
    elif decoder:
        looks = f"a decoder LLM ({', '.join(architectures)})" + (" with genai_config.json" if genai else "")
        if not genai:
            missing.append("genai_config.json (an onnxruntime-genai package)")
        hint = "use an AMD Ryzen AI package of the model (amd/*_rai_*), or build one with onnxruntime-genai's builder"
    else:
        looks = (
            "a cross-encoder (reranker)"
            if cross
            else "an encoder (embedding model)"
            if (architectures or (folder / "modules.json").is_file())
            else "no model layout the plugin knows"
        )
        if not onnx_files:
            missing.append("an ONNX export (onnx/model.onnx or model.onnx)")
        if "tokenizer.json" not in tokenizer:
            missing.append("tokenizer.json (Hugging Face's fast tokenizer file)")
        task = "text-classification" if cross else "feature-extraction"
        hint = f"export it: optimum-cli export onnx --task {task} --model REPO_OR_FOLDER OUT"
    return FolderLayout(folder, looks, files, missing, hint, error)
