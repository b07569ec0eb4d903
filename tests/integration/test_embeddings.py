"""The embedding engine on the tiny BERT fixtures: folder facts, pooling, padding, batching, bad input."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from conftest import FIXTURES
from ryzenai_core import (
    ConfigError,
    InvalidRequestError,
    MissingTokenizerError,
    ModelNotFoundError,
    RuntimeNotAvailableError,
    UnsupportedModelError,
)
from ryzenai_core.embeddings.batches import l2_normalize, plan_batches
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.embeddings.folder import import_tokenizers
from ryzenai_core.embeddings.package import BGE_QUERY_INSTRUCTION, EmbeddingPackage, is_embedding_folder
from ryzenai_core.embeddings.runner import import_onnxruntime, pool

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
TINY_STATIC = FIXTURES / "embeddings" / "tiny-bert-static"
TEXTS = [
    "Who is the director of the Vantor Lab?",
    "hello",
    "The Orsk Foundry is located in Tamberlow. The Orsk Foundry was established in 1998. " * 3,
    "Kessarine Systems builds the Pellix accelerator.",
    "sparse attention",
]


@pytest.fixture(scope="module")
def cpu() -> EmbeddingEngine:
    return EmbeddingEngine(TINY_ST)


def _reference(folder: Path, onnx_file: Path, texts: list[str], mode: str) -> np.ndarray:
    """Plain numpy on the graph's own outputs: one text per run, no padding, pool, L2."""
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    static = session.get_inputs()[0].shape
    out = []
    for text in texts:
        enc = tok.encode(text)
        n = len(enc.ids)
        width = static[1] if isinstance(static[1], int) else n
        ids = np.zeros((1, width), np.int64)
        mask = np.zeros((1, width), np.int64)
        ids[0, :n], mask[0, :n] = enc.ids, 1
        (hidden,) = session.run(
            ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        states = hidden[0, :n]
        vec = states[0] if mode == "cls" else states.sum(axis=0) / n
        out.append(vec / np.linalg.norm(vec))
    return np.array(out)


# -- the folder ---------------------------------------------------------------------------


def test_sentence_transformers_folder_is_read_as_hugging_face_ships_it():
    pkg = EmbeddingPackage.open(TINY_ST)
    d = pkg.describe()
    assert d["onnx_file"] == "onnx/model.onnx"
    assert (d["dims"], d["pooling"], d["pooling_source"], d["normalize"]) == (32, "mean", "1_Pooling/config.json", True)
    assert (d["max_length"], d["max_length_source"]) == (128, "sentence_bert_config.json max_seq_length")
    assert (d["shapes"], d["static_shape"], d["output"]) == ("dynamic", None, "last_hidden_state")
    assert d["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert d["query_instruction"] == "" and is_embedding_folder(TINY_ST)


def test_amd_style_static_export_is_read_with_its_fixed_shape():
    pkg = EmbeddingPackage.open(TINY_STATIC)
    assert pkg.static_shape == (1, 128) and pkg.pooling == "cls" and pkg.onnx_file.name == "model.onnx"
    engine = EmbeddingEngine(pkg)
    d = engine.describe()
    assert (d["run_shapes"], d["buckets"], d["static_rows"], d["provider"]) == (
        "static",
        [128],
        1,
        "CPUExecutionProvider",
    )
    with pytest.raises(InvalidRequestError, match=r"shapes='dynamic' but model.onnx has a static shape \[1, 128\]"):
        EmbeddingEngine(pkg, shapes="dynamic")


def test_llm_packages_are_not_embedding_folders():
    assert not is_embedding_folder(FIXTURES / "models" / "tiny-llama")


def test_bge_models_get_bge_query_instruction(copy_package):
    folder = copy_package(TINY_ST, "bge-tiny-en-v1.5")
    pkg = EmbeddingPackage.open(folder)
    assert pkg.query_instruction == BGE_QUERY_INSTRUCTION and pkg.document_instruction == ""


def test_an_empty_query_instruction_turns_off_a_bge_models_default_in_the_core_and_both_faces(copy_package):
    from langchain_ryzenai import RyzenAIEmbeddings
    from llamaindex_ryzenai import RyzenAIEmbedding

    folder = str(copy_package(TINY_ST, "bge-tiny-en-v1.5"))
    engine = EmbeddingEngine.get(folder)
    plain = engine.embed(["vantor"]).vectors[0]  # a document: no instruction
    prefixed = engine.embed([BGE_QUERY_INSTRUCTION + "vantor"]).vectors[0]
    assert engine.embed(["vantor"], kind="query").vectors[0] == prefixed  # the default: BGE's
    assert engine.embed(["vantor"], kind="query", instruction="").vectors[0] == plain
    assert engine.embed(["vantor"], kind="query", instruction="").tokens == engine.embed(["vantor"]).tokens
    for default, off in (
        (
            RyzenAIEmbeddings(model=folder).embed_query,
            RyzenAIEmbeddings(model=folder, query_instruction="").embed_query,
        ),
        (
            RyzenAIEmbedding(model=folder).get_query_embedding,
            RyzenAIEmbedding(model=folder, query_instruction="").get_query_embedding,
        ),
    ):
        assert default("vantor") == prefixed
        assert off("vantor") == plain


# -- pooling, normalisation, padding ------------------------------------------------------


def test_mean_pooling_and_normalisation_equal_numpy_on_the_same_outputs(cpu):
    got = np.array(cpu.embed(TEXTS).vectors)
    want = _reference(TINY_ST, TINY_ST / "onnx" / "model.onnx", TEXTS, "mean")
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_cls_pooling_of_the_static_export_equals_numpy_on_the_same_outputs():
    got = np.array(EmbeddingEngine(TINY_STATIC).embed(TEXTS).vectors)
    want = _reference(TINY_STATIC, TINY_STATIC / "model.onnx", TEXTS, "cls")
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_static_bucketed_padding_equals_dynamic_and_pads_less_than_one_fixed_length(cpu, tmp_path):
    dynamic = cpu.embed(TEXTS)
    bucketed = EmbeddingEngine(TINY_ST, shapes="static", buckets=[16, 32, 64], cache_dir=tmp_path).embed(TEXTS)
    fixed = EmbeddingEngine(TINY_ST, shapes="static", buckets=[128], cache_dir=tmp_path).embed(TEXTS)
    np.testing.assert_allclose(bucketed.vectors, dynamic.vectors, atol=1e-5)
    np.testing.assert_allclose(fixed.vectors, dynamic.vectors, atol=1e-5)
    assert bucketed.tokens == dynamic.tokens == fixed.tokens
    buckets = [next(b for b in (16, 32, 64, 128) if b >= n) for n in dynamic.tokens]
    assert bucketed.padding == sum(b - n for b, n in zip(buckets, dynamic.tokens, strict=True))
    assert fixed.padding == 128 * len(TEXTS) - sum(dynamic.tokens)
    assert bucketed.padding < fixed.padding
    assert sorted(bucketed.shapes) == bucketed.shapes and all(rows == 1 for rows, _ in bucketed.shapes)
    made = {p.name for p in tmp_path.glob("static/*/*.onnx")}  # a variant per shape used, made once
    assert made == {f"model_1x{n}.onnx" for _, n in bucketed.shapes + fixed.shapes}


def test_the_static_export_equals_the_dynamic_graph_with_the_same_weights(cpu):
    cls = EmbeddingEngine(EmbeddingPackage.open(TINY_ST, pooling="cls"))
    np.testing.assert_allclose(EmbeddingEngine(TINY_STATIC).embed(TEXTS).vectors, cls.embed(TEXTS).vectors, atol=1e-5)


def test_batching_does_not_change_vectors(cpu):
    one = [cpu.embed([t]).vectors[0] for t in TEXTS]
    np.testing.assert_allclose(cpu.embed(TEXTS, batch_size=2).vectors, one, atol=1e-5)
    result = cpu.embed(TEXTS, batch_size=2)
    assert len(result.shapes) == 3 and [s[1] for s in result.shapes] == sorted(s[1] for s in result.shapes)


def test_normalize_off_and_instructions(cpu):
    raw = np.array(cpu.embed(["hello there"], normalize=False).vectors[0])
    assert abs(np.linalg.norm(raw) - 1.0) > 1e-3
    np.testing.assert_allclose(l2_normalize(raw[None])[0], cpu.embed(["hello there"]).vectors[0], atol=1e-6)
    prefixed = cpu.embed(["hello there"], instruction="query: ")
    assert prefixed.tokens[0] > cpu.embed(["hello there"]).tokens[0]
    np.testing.assert_allclose(prefixed.vectors, cpu.embed(["query: hello there"]).vectors, atol=1e-6)


def test_pool_rejects_states_that_are_not_per_token():
    mask = np.ones((2, 5), np.int64)
    with pytest.raises(UnsupportedModelError, match=r"pooler_output has shape \[2, 32\], but mean pooling needs"):
        pool(np.zeros((2, 32), np.float32), mask, "mean", output="pooler_output")
    states = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    mask[1, 3:] = 0
    np.testing.assert_allclose(pool(states, mask, "mean")[1], states[1, :3].mean(axis=0))
    np.testing.assert_allclose(pool(states, mask, "cls"), states[:, 0])


# -- batches and buckets -------------------------------------------------------------------


def test_plan_batches_sorts_by_length_and_uses_prefill_bucket_accounting():
    lengths = [40, 5, 17, 130, 9]
    dyn = plan_batches(lengths, batch_size=2)
    assert [b.indices for b in dyn] == [(1, 4), (2, 0), (3,)] and [b.length for b in dyn] == [9, 40, 130]
    static = plan_batches(lengths, batch_size=8, buckets=[16, 64, 256], static_rows=2)
    assert [(b.indices, b.rows, b.length) for b in static] == [((1, 4), 2, 16), ((2, 0), 2, 64), ((3,), 2, 256)]
    assert static[-1].filler_rows == 1
    with pytest.raises(InvalidRequestError, match="batch_size is 0"):
        plan_batches(lengths, batch_size=0)


def test_a_long_text_among_short_ones_runs_apart_with_the_same_vectors_in_input_order(cpu):
    long = "The Orsk Foundry is located in Tamberlow. The Orsk Foundry was established in 1998. " * 9
    texts = [f"note {i} on the lab" for i in range(15)] + [long] + [f"memo {i}" for i in range(16)]
    whole = EmbeddingEngine(TINY_ST)
    whole.max_padding = None  # as before: one run of 32 rows padded to the long text
    split, together = cpu.embed(texts), whole.embed(texts)
    assert together.shapes == [(32, 128)] and len(split.shapes) >= 2 and (1, 128) in split.shapes
    assert split.padding < together.padding / 10
    np.testing.assert_allclose(split.vectors, together.vectors, atol=1e-5)
    for i in (0, 15, 31):  # each vector is its own text's, where the text was
        np.testing.assert_allclose(split.vectors[i], cpu.embed([texts[i]]).vectors[0], atol=1e-5)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 128), min_size=1, max_size=40), st.integers(1, 8))
def test_every_text_runs_once_in_a_bucket_that_holds_it(lengths, rows):
    batches = plan_batches(lengths, batch_size=4, buckets=[16, 32, 64, 128], static_rows=rows)
    seen = sorted(i for b in batches for i in b.indices)
    assert seen == list(range(len(lengths)))
    for b in batches:
        assert b.length in (16, 32, 64, 128) and len(b.indices) <= rows
        assert all(lengths[i] <= b.length and (b.length == 16 or lengths[i] > b.length // 2) for i in b.indices)


def test_filler_rows_of_a_static_batch_do_not_change_vectors(tmp_path, cpu):
    folder = tmp_path / "rows2"
    shutil.copytree(TINY_STATIC, folder)
    model = onnx.load(str(folder / "model.onnx"))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = 2
    onnx.save_model(model, str(folder / "model.onnx"))
    result = EmbeddingEngine(folder).embed(TEXTS)
    assert result.shapes == [(2, 128)] * 3 and result.padding == 6 * 128 - sum(result.tokens)
    np.testing.assert_allclose(result.vectors, EmbeddingEngine(TINY_STATIC).embed(TEXTS).vectors, atol=1e-5)


# -- truncation and bad input ---------------------------------------------------------------


def test_a_text_over_the_maximum_is_truncated_and_reported(cpu, caplog):
    long = "the vantor lab " * 100
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        result = cpu.embed(["short text", long])
    assert result.truncated == [1] and result.tokens[1] == 128 and cpu.count_tokens([long])[0] > 128
    assert "1 of 2 text(s) are longer than tiny-bert-st's maximum of 128 tokens and were truncated" in caplog.text
    with pytest.raises(
        InvalidRequestError, match=r"text 1 is \d+ tokens, over tiny-bert-st's maximum of 128 .*Split the text"
    ):
        cpu.embed(["short text", long], on_overflow="error")


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["fine", 3], "text 1 is a int, not a string"),
        ("one string", "texts is one string"),
    ],
)
def test_bad_texts_are_typed_errors_naming_the_value(cpu, texts, message):
    with pytest.raises(InvalidRequestError, match=message):
        cpu.embed(texts)


def test_bad_options_are_typed_errors(cpu):
    with pytest.raises(InvalidRequestError, match="on_overflow 'drop'"):
        cpu.embed(["x"], on_overflow="drop")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="provider 'gpu'"):
        EmbeddingEngine(TINY_ST, provider="gpu")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=r"buckets \[1, 64\]"):
        EmbeddingEngine(TINY_ST, shapes="static", buckets=[1, 64])


def test_a_folder_without_a_tokenizer(copy_package):
    folder = copy_package(TINY_ST)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(MissingTokenizerError, match=r"no tokenizer.json in .*save_pretrained"):
        EmbeddingPackage.open(folder)


def test_a_folder_without_a_model_or_with_several(copy_package, tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        EmbeddingPackage.open(tmp_path / "nope")
    folder = copy_package(TINY_ST)
    shutil.copy(folder / "onnx" / "model.onnx", folder / "onnx" / "model_O4.onnx")
    assert EmbeddingPackage.open(folder, onnx_file="onnx/model_O4.onnx").onnx_file.name == "model_O4.onnx"
    assert EmbeddingPackage.open(folder).onnx_file.name == "model.onnx"  # Hugging Face's default name first
    (folder / "onnx" / "model.onnx").rename(folder / "onnx" / "model_O3.onnx")
    with pytest.raises(
        InvalidRequestError,
        match=r"several ONNX models \(onnx/model_O3.onnx, onnx/model_O4.onnx\); choose one with onnx_file=",
    ):
        EmbeddingPackage.open(folder)
    with pytest.raises(InvalidRequestError, match="outside the model folder"):
        EmbeddingPackage.open(folder, onnx_file="../x.onnx")
    shutil.rmtree(folder / "onnx")
    with pytest.raises(ModelNotFoundError, match="no ONNX model in .*optimum-cli export onnx"):
        EmbeddingPackage.open(folder)


def test_a_pooling_mode_the_engine_does_not_have(copy_package):
    folder = copy_package(TINY_ST)
    cfg = json.loads((folder / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"asks for pooling \['max_tokens'\].*pass pooling='cls' or pooling='mean'"):
        EmbeddingPackage.open(folder)
    assert EmbeddingPackage.open(folder, pooling="mean").pooling_source == "given"


def _graph(folder: Path, outputs: list[tuple[str, list]], inputs=("input_ids",), vocab: int = 700) -> None:
    """A tiny graph: an embedding table lookup, reduced or not, under the given output names."""
    table = numpy_helper.from_array(np.random.default_rng(0).normal(size=(vocab, 4)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["states"])]
    outs = []
    for name, shape in outputs:
        if len(shape) == 3:
            nodes.append(helper.make_node("Identity", ["states"], [name]))
        else:
            nodes.append(helper.make_node("ReduceMean", ["states"], [name], axes=[1], keepdims=0))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in inputs]
    model = helper.make_model(
        helper.make_graph(nodes, "g", ins, outs, [table]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    (folder / "onnx").mkdir(exist_ok=True)
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))


def test_a_model_whose_outputs_are_not_what_pooling_expects(copy_package):
    folder = copy_package(TINY_ST)
    _graph(folder, [("pooler_output", ["b", 4])])
    with pytest.raises(
        UnsupportedModelError, match=r"outputs pooler_output \['b', 4\]: none is per-token hidden states"
    ):
        EmbeddingPackage.open(folder)
    _graph(folder, [("states3", ["b", "s", 4])], inputs=("input_ids", "pixel_values"))
    with pytest.raises(UnsupportedModelError, match=r"takes inputs \['input_ids', 'pixel_values'\]"):
        EmbeddingPackage.open(folder)
    _graph(folder, [("pooled", ["b", 4]), ("hidden", ["b", "s", 4])])
    pkg = EmbeddingPackage.open(folder)
    assert (pkg.output, pkg.inputs, pkg.dims) == ("hidden", ("input_ids",), 4)
    assert len(EmbeddingEngine(pkg).embed(["any text"]).vectors[0]) == 4


# -- runtime and providers -------------------------------------------------------------------


def test_provider_npu_without_vitisai_says_what_to_do():
    with pytest.raises(
        RuntimeNotAvailableError, match=r"provider='npu' needs onnxruntime's VitisAIExecutionProvider.*provider='cpu'"
    ):
        EmbeddingEngine(TINY_ST, provider="npu")


def test_missing_runtime_packages_name_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(RuntimeNotAvailableError, match=r"onnxruntime-vitisai.*pip install 'ryzenai-llm\[cpu\]'"):
        import_onnxruntime()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(
        RuntimeNotAvailableError, match=r"`tokenizers` package .*pip install 'ryzenai-llm\[embeddings\]'"
    ):
        import_tokenizers()


def test_the_engine_is_shared_per_folder_and_settings():
    a = EmbeddingEngine.get(str(TINY_ST))
    assert EmbeddingEngine.get(TINY_ST) is a
    assert EmbeddingEngine.get(TINY_ST, shapes="static") is not a


# -- command line and demo ---------------------------------------------------------------------


def test_info_describes_an_embedding_folder(capsys):
    from ryzenai_cli.main import main

    assert main(["info", str(TINY_STATIC)]) == 0
    out = capsys.readouterr().out
    assert "embedding model    tiny-bert-static" in out and "graph shapes       static [1, 128]" in out
    assert "pooling            cls (1_Pooling/config.json)" in out and "runs static, buckets 128" in out
    assert main(["info", str(TINY_ST), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["kind"], facts["dims"], facts["max_length"], facts["shapes"], facts["provider"]) == (
        "embedding",
        32,
        128,
        "dynamic",
        "CPUExecutionProvider",
    )


def test_demo_retrieves_with_an_embedding_model(capsys, tmp_path, llamaindex_event_loop):
    from langchain_core.documents import Document

    from langchain_ryzenai import RyzenAIEmbeddings
    from llamaindex_ryzenai import RyzenAIEmbedding, RyzenAILLM
    from ryzenai_cli.demo_langchain import build_retriever
    from ryzenai_cli.demo_llamaindex import build_query_engine
    from ryzenai_cli.main import main

    texts = [f"Document {i}: the Vexlar probe number {i} was built by Oda Quen{i}." for i in range(3)]
    docs = [Document(page_content=t) for t in texts]
    retriever = build_retriever(docs, k=1, embeddings=RyzenAIEmbeddings(model=str(TINY_ST)))
    assert [d.page_content for d in retriever.invoke(texts[1])] == [texts[1]]
    engine = build_query_engine(
        RyzenAILLM(model="tiny-qa-llama"), texts, k=1, embed_model=RyzenAIEmbedding(model=str(TINY_ST))
    )
    assert [n.node.get_content() for n in engine.retrieve(texts[2])] == [texts[2]]
    for i, t in enumerate(texts):
        (tmp_path / f"d{i}.txt").write_text(t)
    code = main(
        [
            "demo",
            "--docs",
            str(tmp_path),
            "--question",
            "Who built the Vexlar probe number 1?",
            "--max-new-tokens",
            "4",
            "--embed-model",
            str(TINY_ST),
        ]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "(3 documents, tiny-bert-st embeddings on CPUExecutionProvider, top 2)" in out
    assert "LangChain" in out and "LlamaIndex" in out


def test_a_graph_with_a_fixed_batch_and_a_dynamic_sequence_runs_its_batch_size(copy_package, tmp_path, cpu):
    folder = copy_package(TINY_ST)
    model = onnx.load(str(folder / "onnx" / "model.onnx"))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = 2
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))
    pkg = EmbeddingPackage.open(folder)
    assert pkg.static_shape is None and pkg.fixed_rows == 2
    result = EmbeddingEngine(pkg, buckets=[16, 64], cache_dir=tmp_path).embed(TEXTS)  # static: its batch is
    assert {rows for rows, _ in result.shapes} == {2}
    with pytest.raises(InvalidRequestError, match=r"has a static shape \[2, 'sequence'\]"):
        EmbeddingEngine(pkg, shapes="dynamic")
    np.testing.assert_allclose(result.vectors, cpu.embed(TEXTS).vectors, atol=1e-5)
