"""The tiny EmbeddingGemma fixture against sentence-transformers' reference, with onnxruntime and numpy only.

scripts/build_embeddinggemma_fixture.py wrote the folder (google/embeddinggemma-300m's layout) and
embeddinggemma-reference.json (sentence-transformers' vectors at each Matryoshka dimension). These
tests read both without torch: the folder's files say what a runtime must do, and doing it with
onnxruntime and numpy gives the reference vectors, by either of the graph's two outputs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import FIXTURES

FOLDER = FIXTURES / "embeddings" / "tiny-embeddinggemma"
REFERENCE = json.loads((FIXTURES / "embeddings" / "embeddinggemma-reference.json").read_text(encoding="utf-8"))
TOLERANCE = REFERENCE["tolerance"]

ort = pytest.importorskip("onnxruntime")
tokenizers = pytest.importorskip("tokenizers")


def read_json(path: str) -> Any:
    return json.loads((FOLDER / path).read_text(encoding="utf-8"))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file's float32 tensors (its documented layout: u64 header size, JSON header, data)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(data[start:end], dtype="<f4").reshape(info["shape"])
    return out


@pytest.fixture(scope="module")
def session() -> Any:
    return ort.InferenceSession(str(FOLDER / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])


def padded(ids: list[list[int]], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    length = length or max(len(i) for i in ids)
    input_ids = np.zeros((len(ids), length), dtype=np.int64)  # <pad> is 0
    mask = np.zeros_like(input_ids)
    for row, i in enumerate(ids):
        input_ids[row, : len(i)] = i
        mask[row, : len(i)] = 1
    return input_ids, mask


def reference(dims: int) -> np.ndarray:
    return np.asarray(REFERENCE["vectors"][str(dims)], dtype=np.float32)


def test_the_folder_is_embeddinggemmas_sentence_transformers_layout() -> None:
    modules = read_json("modules.json")
    assert [(m["path"], m["type"].rsplit(".", 1)[-1]) for m in modules] == [
        ("", "Transformer"),
        ("1_Pooling", "Pooling"),
        ("2_Dense", "Dense"),
        ("3_Dense", "Dense"),
        ("4_Normalize", "Normalize"),
    ]
    assert read_json("1_Pooling/config.json")["pooling_mode_mean_tokens"] is True
    first, second = read_json("2_Dense/config.json"), read_json("3_Dense/config.json")
    hidden = read_json("config.json")["hidden_size"]
    assert (first["in_features"], first["out_features"], second["out_features"]) == (hidden, 4 * hidden, hidden)
    assert first["bias"] is second["bias"] is False
    assert first["activation_function"] == "torch.nn.modules.linear.Identity"
    config = read_json("config.json")
    assert (config["model_type"], config["architectures"], config["use_bidirectional_attention"]) == (
        "gemma3_text",
        ["Gemma3TextModel"],
        True,
    )
    prompts = read_json("config_sentence_transformers.json")["prompts"]
    assert prompts["query"] == "task: search result | query: " == REFERENCE["prompts"]["query"]
    assert prompts["document"] == "title: none | text: " == REFERENCE["prompts"]["document"]
    assert REFERENCE["dimensions"] == [hidden, hidden * 2 // 3, hidden // 3, hidden // 6]  # 768, 512, 256, 128 scaled


def test_the_tokenizer_file_gives_transformers_ids_with_bos_and_eos() -> None:
    tok = tokenizers.Tokenizer.from_file(str(FOLDER / "tokenizer.json"))
    for item in REFERENCE["items"]:
        ids = tok.encode(REFERENCE["prompts"][item["kind"]] + item["text"]).ids
        assert ids == item["input_ids"], item["text"]
        assert (ids[0], ids[-1]) == (tok.token_to_id("<bos>"), tok.token_to_id("<eos>"))


def test_the_graphs_sentence_embedding_is_the_reference(session: Any) -> None:
    ids, mask = padded([i["input_ids"] for i in REFERENCE["items"]])
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "sentence_embedding"]
    _, vectors = session.run(None, {"input_ids": ids, "attention_mask": mask})
    np.testing.assert_allclose(vectors, reference(REFERENCE["dimensions"][0]), atol=TOLERANCE, rtol=0)


def test_padding_to_a_static_shape_changes_no_vector(session: Any) -> None:
    # As on the NPU: every text padded to one bucket (the model's maximum), one row at a time.
    length = read_json("sentence_bert_config.json")["max_seq_length"]
    for row, item in enumerate(REFERENCE["items"]):
        ids, mask = padded([item["input_ids"]], length)
        _, vector = session.run(None, {"input_ids": ids, "attention_mask": mask})
        np.testing.assert_allclose(vector[0], reference(REFERENCE["dimensions"][0])[row], atol=TOLERANCE, rtol=0)


def test_pooling_and_dense_on_the_host_from_token_embeddings_is_the_reference(session: Any) -> None:
    ids, mask = padded([i["input_ids"] for i in REFERENCE["items"]])
    hidden, _ = session.run(["last_hidden_state", "sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
    m = mask[..., None].astype(np.float32)
    x = (hidden * m).sum(axis=1) / m.sum(axis=1)
    for module in read_json("modules.json"):
        if module["type"].endswith("Dense"):
            x = x @ read_safetensors(FOLDER / module["path"] / "model.safetensors")["linear.weight"].T
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(x, reference(REFERENCE["dimensions"][0]), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("dims", REFERENCE["dimensions"][1:])
def test_matryoshka_dimensions_are_the_full_vector_cut_and_normalised_again(session: Any, dims: int) -> None:
    ids, mask = padded([i["input_ids"] for i in REFERENCE["items"]])
    _, full = session.run(None, {"input_ids": ids, "attention_mask": mask})
    cut = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, reference(dims), atol=TOLERANCE, rtol=0)
    assert not np.allclose(full[:, :dims], reference(dims), atol=TOLERANCE)  # cutting alone is not enough
