"""EmbeddingGemma through the engine and both faces: its layout, prompts and Matryoshka dimensions.

The reference is sentence-transformers' ``encode(text, prompt_name=kind, truncate_dim=dims,
normalize_embeddings=True)`` on the fixture's weights (scripts/build_embeddinggemma_fixture.py):
the faces pass only the text, so the prompt must come from the folder, and ``dimensions`` must
cut and normalise again as sentence-transformers does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import FIXTURES
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.embeddings.modules import matryoshka_dims
from ryzenai_core.embeddings.package import EmbeddingPackage
from ryzenai_core.errors import InvalidRequestError, UnsupportedModelError

GEMMA = FIXTURES / "embeddings" / "tiny-embeddinggemma"
TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
REFERENCE = json.loads((FIXTURES / "embeddings" / "embeddinggemma-reference.json").read_text(encoding="utf-8"))
TOLERANCE = REFERENCE["tolerance"]
ITEMS = REFERENCE["items"]
QUERIES = [i for i, item in enumerate(ITEMS) if item["kind"] == "query"]
DOCUMENTS = [i for i, item in enumerate(ITEMS) if item["kind"] == "document"]


def reference(dims: int, rows: list[int]) -> np.ndarray:
    return np.asarray(REFERENCE["vectors"][str(dims)], dtype=np.float32)[rows]


def texts(rows: list[int]) -> list[str]:
    return [ITEMS[i]["text"] for i in rows]


def without_sentence_embedding(copy_package) -> Path:
    """The fixture with a graph that stops at the token states (pooling and Dense left to the host)."""
    folder = copy_package(GEMMA, "gemma-hidden-only")
    path = folder / "onnx" / "model.onnx"
    model = onnx.load(str(path))
    kept = [o for o in model.graph.output if o.name != "sentence_embedding"]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    onnx.save_model(model, str(path))
    return folder


def test_the_folder_reads_as_embeddinggemma() -> None:
    pkg = EmbeddingPackage.open(GEMMA)
    assert (pkg.output, pkg.pooled_in_graph, pkg.dense, pkg.dims) == ("sentence_embedding", True, (), 48)
    assert (pkg.query_instruction, pkg.document_instruction) == (
        "task: search result | query: ",
        "title: none | text: ",
    )
    assert pkg.prompts_source == "config_sentence_transformers.json prompts"
    assert pkg.matryoshka_dims == (48, 32, 16, 8) and "MatryoshkaLoss" in pkg.matryoshka_source
    assert "sentence_embedding" in pkg.describe()["pipeline"]


@pytest.mark.parametrize("dims", REFERENCE["dimensions"])
def test_langchain_vectors_are_the_reference_at_each_dimension(dims: int) -> None:
    from langchain_ryzenai import RyzenAIEmbeddings

    embeddings = RyzenAIEmbeddings(model=str(GEMMA), dimensions=dims)
    queries = [embeddings.embed_query(t) for t in texts(QUERIES)]
    np.testing.assert_allclose(queries, reference(dims, QUERIES), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(
        embeddings.embed_documents(texts(DOCUMENTS)), reference(dims, DOCUMENTS), atol=TOLERANCE, rtol=0
    )


@pytest.mark.parametrize("dims", REFERENCE["dimensions"])
def test_llamaindex_vectors_are_the_reference_at_each_dimension(dims: int) -> None:
    from llamaindex_ryzenai import RyzenAIEmbedding

    embedding = RyzenAIEmbedding(model=str(GEMMA), dimensions=dims, embed_batch_size=3)
    queries = [embedding.get_query_embedding(t) for t in texts(QUERIES)]
    np.testing.assert_allclose(queries, reference(dims, QUERIES), atol=TOLERANCE, rtol=0)
    documents = embedding.get_text_embedding_batch(texts(DOCUMENTS))
    np.testing.assert_allclose(documents, reference(dims, DOCUMENTS), atol=TOLERANCE, rtol=0)


def test_static_buckets_as_on_the_npu_give_the_reference_too(tmp_path: Path) -> None:
    engine = EmbeddingEngine(GEMMA, shapes="static", buckets=[64, 128], cache_dir=tmp_path)
    result = engine.embed(texts(DOCUMENTS), dimensions=16)
    assert {s[1] for s in result.shapes} <= {64, 128, 256}
    np.testing.assert_allclose(result.vectors, reference(16, DOCUMENTS), atol=TOLERANCE, rtol=0)


def test_a_graph_without_the_sentence_embedding_gets_pooling_and_dense_on_the_host(copy_package) -> None:
    folder = without_sentence_embedding(copy_package)
    pkg = EmbeddingPackage.open(folder)
    assert (pkg.output, pkg.pooled_in_graph, [d.path for d in pkg.dense], pkg.dims) == (
        "last_hidden_state",
        False,
        ["2_Dense", "3_Dense"],
        48,
    )
    assert pkg.describe()["pipeline"] == "mean pooling -> 2_Dense (Dense) -> 3_Dense (Dense) -> normalise"
    engine = EmbeddingEngine(pkg)
    for dims in (48, 8):
        got = engine.embed(texts(QUERIES), kind="query", dimensions=dims).vectors
        np.testing.assert_allclose(got, reference(dims, QUERIES), atol=TOLERANCE, rtol=0)


def test_dimensions_are_refused_for_a_model_not_trained_for_them() -> None:
    from langchain_ryzenai import RyzenAIEmbeddings
    from llamaindex_ryzenai import RyzenAIEmbedding

    for face in (RyzenAIEmbeddings, RyzenAIEmbedding):
        with pytest.raises(
            InvalidRequestError, match=r"dimensions=16, but tiny-bert-st was not trained for Matryoshka"
        ):
            face(model=str(TINY_ST), dimensions=16)
        with pytest.raises(InvalidRequestError, match=r"dimensions=20 is not a size .* trained for: \[48, 32, 16, 8\]"):
            face(model=str(GEMMA), dimensions=20)
    assert len(RyzenAIEmbeddings(model=str(TINY_ST), dimensions=32).embed_query("its full size")) == 32
    with pytest.raises(InvalidRequestError, match=r"dimensions=12"):
        EmbeddingEngine.get(GEMMA).embed(["a"], dimensions=12)


def test_how_a_model_declares_its_matryoshka_dimensions(tmp_path: Path) -> None:
    assert matryoshka_dims(tmp_path, "google/embeddinggemma-300m", 768) == (
        (768, 512, 256, 128),
        "known model (embeddinggemma: its model card)",
    )
    assert matryoshka_dims(tmp_path, "embeddinggemma-300m_npu_rai_1.8.0_npu_4K", 768)[0] == (768, 512, 256, 128)
    assert matryoshka_dims(tmp_path, "tiny-embeddinggemma", 48) == ((), "")  # a known name at another size: not it
    assert matryoshka_dims(tmp_path, "bge-small-en-v1.5", 384) == ((), "")
    (tmp_path / "README.md").write_text(
        '* Loss: MatryoshkaLoss\n  "matryoshka_dims": [\n 1024,\n 256, 64\n ],', encoding="utf-8"
    )
    assert matryoshka_dims(tmp_path, "my-finetune", 768)[0] == (256, 64)  # sizes over the vector's are left out


def test_modules_the_engine_cannot_apply_are_refused_by_name(copy_package) -> None:
    folder = without_sentence_embedding(copy_package)
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    modules.insert(4, {"idx": 4, "name": "4", "path": "4_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    with pytest.raises(UnsupportedModelError, match=r"runs 4_LayerNorm \(LayerNorm\) besides pooling, Dense layers"):
        EmbeddingPackage.open(folder)
    dense = json.loads((folder / "2_Dense" / "config.json").read_text(encoding="utf-8"))
    dense["activation_function"] = "torch.nn.modules.activation.ReLU"
    (folder / "2_Dense" / "config.json").write_text(json.dumps(dense), encoding="utf-8")
    del modules[4]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    with pytest.raises(UnsupportedModelError, match=r"activation_function is 'torch.nn.modules.activation.ReLU'"):
        EmbeddingPackage.open(folder)
    (folder / "3_Dense" / "model.safetensors").unlink()
    dense["activation_function"] = "torch.nn.modules.linear.Identity"
    (folder / "2_Dense" / "config.json").write_text(json.dumps(dense), encoding="utf-8")
    with pytest.raises(UnsupportedModelError, match=r"3_Dense has no model.safetensors"):
        EmbeddingPackage.open(folder)


def test_info_on_a_folder_of_no_known_layout_says_what_it_is_and_lacks(tmp_path: Path, capsys) -> None:
    from ryzenai_cli.main import main

    genai = tmp_path / "embeddinggemma-300m_npu_rai_1.8.0_npu_4K"  # AMD's NPU package, if it is an OGA layout
    genai.mkdir()
    (genai / "genai_config.json").write_text(json.dumps({"model": {"type": "gemma3_text"}}), encoding="utf-8")
    (genai / "config.json").write_text(json.dumps({"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text"}))
    (genai / "model.onnx").write_bytes(b"")
    assert main(["info", str(genai)]) == 2
    out = capsys.readouterr().out
    assert "looks like    an encoder (embedding model) packaged for onnxruntime-genai (genai_config.json)" in out
    assert "onnx models   model.onnx (no inputs)" in out and "missing       tokenizer.json" in out
    assert "read as one   no tokenizer.json in" in out  # it was tried as an embedding folder first
    for name in ("tokenizer.json", "sentence_bert_config.json"):  # with what the engine reads: it opens
        (genai / name).write_bytes((GEMMA / name).read_bytes())
    (genai / "model.onnx").write_bytes((GEMMA / "onnx" / "model.onnx").read_bytes())
    assert main(["info", str(genai), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["kind"], facts["output"], facts["dims"]) == ("embedding", "sentence_embedding", 48)
    assert facts["matryoshka_dims"] is None  # its name says EmbeddingGemma, its size (48) does not: no cut
    weights = tmp_path / "weights-only"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (weights / "model.safetensors").write_bytes(b"")
    assert main(["info", str(weights), "--json"]) == 2
    facts = json.loads(capsys.readouterr().out)
    assert facts["looks_like"] == "an encoder (embedding model)" and facts["files"]["weights"] == "model.safetensors"
    assert facts["missing"] == [
        "an ONNX export (onnx/model.onnx or model.onnx)",
        "tokenizer.json (Hugging Face's fast tokenizer file)",
    ]
    assert "optimum-cli export onnx --task feature-extraction" in facts["hint"]
