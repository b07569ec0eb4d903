"""The reranking engine on the tiny cross-encoder fixtures: folder facts, pair encoding, scores
against transformers' and sentence-transformers' reference, padding, truncation, bad input."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import onnx
import pytest

from conftest import FIXTURES
from ryzenai_core import (
    InvalidRequestError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ryzenai_core.embeddings.package import EmbeddingPackage, is_embedding_folder
from ryzenai_core.embeddings.runner import LocalBackend
from ryzenai_core.rerank.engine import RerankEngine
from ryzenai_core.rerank.package import RerankPackage, is_rerank_folder

RERANK = FIXTURES / "rerank"
BERT = RERANK / "tiny-bert-cross-encoder"
BERT_STATIC = RERANK / "tiny-bert-cross-encoder-static"
XLMR = RERANK / "tiny-xlmr-reranker"
XLMR_STATIC = RERANK / "tiny-xlmr-reranker-static"
TWO_LABELS = RERANK / "tiny-bert-2-labels"
REFERENCE = json.loads((RERANK / "reference.json").read_text(encoding="utf-8"))
PAIRS = [tuple(p) for p in REFERENCE["pairs"]]
QUERY = "Who is the director of the Vantor Lab?"
DOCS = [
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "x",
    "The Orsk Foundry is located in Tamberlow. The Orsk Foundry was established in 1998. " * 4,
    "Kessarine Systems builds the Pellix accelerator.",
    "sparse attention",
]
FOLDERS = [BERT, BERT_STATIC, XLMR, XLMR_STATIC]


def _reference(folder):
    return REFERENCE["models"][folder.name.removesuffix("-static")]


@pytest.fixture
def fed(monkeypatch):
    """The (input_ids, attention_mask, token_type_ids) rows of every run in this process."""
    runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    original = LocalBackend.run

    def spy(self, ids, mask, types):
        runs.append((ids.copy(), mask.copy(), types.copy()))
        return original(self, ids, mask, types)

    monkeypatch.setattr(LocalBackend, "run", spy)
    return runs


# -- the folder ---------------------------------------------------------------------------


def test_a_bert_cross_encoder_folder_is_read_as_hugging_face_ships_it():
    d = RerankPackage.open(BERT).describe()
    assert (d["kind"], d["architecture"], d["model_type"]) == ("reranker", "BertForSequenceClassification", "bert")
    assert (d["onnx_file"], d["shapes"], d["output"]) == ("onnx/model.onnx", "dynamic", "logits")
    assert d["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert (d["max_length"], d["max_length_source"]) == (512, "tokenizer_config.json model_max_length")
    assert (d["activation"], d["activation_source"]) == ("sigmoid", "config.json sentence_transformers.activation_fn")
    assert is_rerank_folder(BERT) and is_rerank_folder(XLMR) and is_rerank_folder(TWO_LABELS)  # refused when opened


def test_an_xlm_roberta_reranker_has_no_token_type_ids_and_its_positions_start_after_padding(copy_package):
    pkg = RerankPackage.open(XLMR)
    assert (pkg.architecture, pkg.inputs, pkg.max_length) == (
        "XLMRobertaForSequenceClassification",
        ("input_ids", "attention_mask"),
        512,
    )
    assert pkg.activation_source.startswith("default: sigmoid")
    folder = copy_package(XLMR)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["model_max_length"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    pkg = RerankPackage.open(folder)  # 514 position rows, 2 of them never a token's
    assert pkg.max_length == 512 and pkg.max_length_source == (
        "config.json max_position_embeddings 514, less the 2 positions xlm-roberta keeps for padding"
    )


def test_static_exports_run_their_own_shape():
    for folder in (BERT_STATIC, XLMR_STATIC):
        d = RerankEngine(folder).describe()
        assert (d["static_shape"], d["run_shapes"], d["buckets"], d["static_rows"]) == ([1, 512], "static", [512], 1)


def test_the_engine_says_how_the_tokenizer_pairs_texts():
    assert RerankEngine(BERT).pair_template() == "[CLS] query [SEP] passage [SEP]"
    assert RerankEngine(XLMR).pair_template() == "<s> query </s> </s> passage </s>"


def test_embedding_and_llm_folders_are_not_rerankers():
    assert not is_rerank_folder(FIXTURES / "embeddings" / "tiny-bert-st")
    assert not is_rerank_folder(FIXTURES / "models" / "tiny-llama")
    assert is_embedding_folder(BERT)  # why `info` asks is_rerank_folder first


# -- scores against the reference -------------------------------------------------------------


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_scores_equal_transformers_and_cross_encoder_predict_on_the_same_weights(folder):
    ref = _reference(folder)
    engine = RerankEngine(folder)
    one = [engine.rerank(q, [p]) for q, p in PAIRS]
    np.testing.assert_allclose([r.logits[0] for r in one], ref["logits"], atol=1e-5)
    np.testing.assert_allclose([r.scores[0] for r in one], ref["scores"], atol=1e-5)
    assert [r.tokens[0] for r in one] == [len(ids) for ids in ref["input_ids"]]


@pytest.mark.parametrize("folder", [BERT, XLMR], ids=lambda f: f.name)
def test_pairs_are_encoded_as_the_tokenizer_pairs_them(folder, fed):
    ref = _reference(folder)
    engine = RerankEngine(folder)
    for (query, passage), ids in zip(PAIRS, ref["input_ids"], strict=True):
        engine.rerank(query, [passage])
        got_ids, mask, types = fed[-1]
        assert got_ids.tolist() == [ids] and mask.tolist() == [[1] * len(ids)]
        want_types = ref["token_type_ids"][ref["input_ids"].index(ids)] if ref["token_type_ids"] else [0] * len(ids)
        assert types.tolist() == [want_types]
    if folder == BERT:  # token_type_ids 0 for [CLS] query [SEP], 1 for passage [SEP]
        assert set(ref["token_type_ids"][0]) == {0, 1} and ref["token_type_ids"][0][-1] == 1


@pytest.mark.parametrize("folder", [BERT, XLMR], ids=lambda f: f.name)
def test_static_bucketed_padding_equals_dynamic_and_pads_less_than_one_fixed_512(folder, tmp_path):
    dynamic = RerankEngine(folder).rerank(QUERY, DOCS)
    bucketed = RerankEngine(folder, shapes="static", buckets=[32, 64, 128], cache_dir=tmp_path).rerank(QUERY, DOCS)
    fixed = RerankEngine(folder, shapes="static", buckets=[512], cache_dir=tmp_path).rerank(QUERY, DOCS)
    np.testing.assert_allclose(bucketed.scores, dynamic.scores, atol=1e-5)
    np.testing.assert_allclose(fixed.scores, dynamic.scores, atol=1e-5)
    assert bucketed.tokens == dynamic.tokens == fixed.tokens
    buckets = [next(b for b in (32, 64, 128, 512) if b >= n) for n in dynamic.tokens]
    assert bucketed.padding == sum(b - n for b, n in zip(buckets, dynamic.tokens, strict=True))
    assert fixed.padding == 512 * len(DOCS) - sum(dynamic.tokens) > bucketed.padding
    assert bucketed.shapes == sorted(bucketed.shapes) and {rows for rows, _ in bucketed.shapes} == {1}


def test_one_call_with_many_pairs_equals_each_pair_alone_in_any_batch_size():
    engine = RerankEngine(XLMR)
    alone = [engine.rerank(QUERY, [d]).scores[0] for d in DOCS]
    for batch_size in (1, 2, 32):
        np.testing.assert_allclose(engine.rerank(QUERY, DOCS, batch_size=batch_size).scores, alone, atol=1e-5)
    assert len(engine.rerank(QUERY, DOCS, batch_size=2).shapes) == 3


def test_a_long_passage_among_short_ones_runs_apart_with_the_same_scores_in_input_order():
    long = " ".join(DOCS) * 12
    passages = [f"note {i} on the lab" for i in range(15)] + [long] + [f"memo {i}" for i in range(16)]
    split = RerankEngine(BERT)
    whole = RerankEngine(BERT)
    whole.max_padding = None  # as before: one run of 32 pairs padded to the long one
    a, b = split.rerank(QUERY, passages), whole.rerank(QUERY, passages)
    assert b.shapes == [(32, 512)] and (1, 512) in a.shapes and a.padding < b.padding / 10
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)
    for i in (0, 15, 31):
        np.testing.assert_allclose(a.scores[i], split.rerank(QUERY, [passages[i]]).scores[0], atol=1e-6)


def test_filler_rows_of_a_static_batch_do_not_change_scores(copy_package, tmp_path):
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

    folder = copy_package(BERT)
    model = onnx.load(str(folder / "onnx" / "model.onnx"))
    make_dim_param_fixed(model.graph, "batch_size", 2)  # a graph that runs two pairs at a time
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))
    result = RerankEngine(folder, cache_dir=tmp_path).rerank(QUERY, DOCS)  # static: its batch is
    assert {rows for rows, _ in result.shapes} == {2} and sum(result.tokens) + result.padding == sum(
        r * n for r, n in result.shapes
    )
    np.testing.assert_allclose(result.scores, RerankEngine(BERT).rerank(QUERY, DOCS).scores, atol=1e-5)


def test_ranking_is_best_first_and_top_n_keeps_the_best():
    result = RerankEngine(BERT).rerank(QUERY, DOCS)
    order = result.ranking
    assert sorted(order) == list(range(len(DOCS)))
    assert [result.scores[i] for i in order] == sorted(result.scores, reverse=True)
    assert result.top(2) == order[:2] and result.top(None) == order


def test_identity_activation_gives_the_logits(copy_package):
    folder = copy_package(BERT)
    config = json.loads((folder / "config.json").read_text())
    config["sentence_transformers"]["activation_fn"] = "torch.nn.modules.linear.Identity"
    (folder / "config.json").write_text(json.dumps(config))
    result = RerankEngine(folder).rerank(QUERY, DOCS)
    assert result.scores == pytest.approx(result.logits, abs=1e-6)
    assert RerankPackage.open(folder, activation="sigmoid").activation_source == "given"
    config["sentence_transformers"]["activation_fn"] = "torch.nn.modules.activation.Tanh"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        UnsupportedModelError, match=r"activation_fn is 'torch.nn.modules.activation.Tanh'.*activation='sigmoid'"
    ):
        RerankPackage.open(folder)


# -- truncation --------------------------------------------------------------------------------


#: A query of 260 (BERT) and 400 (XLM-R) tokens: cutting the longest of the pair first would cut it too.
LONG_QUERY = "who directs the vantor lab " * 20


@pytest.mark.parametrize("query", [QUERY, LONG_QUERY], ids=["question", "long-query"])
@pytest.mark.parametrize("folder", [BERT, XLMR], ids=lambda f: f.name)
def test_a_passage_over_the_maximum_is_cut_never_the_query_and_reported(folder, query, fed, caplog):
    long = " ".join(DOCS) * 12
    engine = RerankEngine(folder)
    assert len(engine.tokenizer.encode(query, add_special_tokens=False).ids) >= (250 if query == LONG_QUERY else 1)
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        result = engine.rerank(query, ["short passage", long])
    assert result.truncated == [1] and result.tokens[1] == 512
    assert f"1 of 2 document(s) do not fit {folder.name}'s maximum of 512 tokens beside the query" in caplog.text
    assert "the query was kept whole" in caplog.text
    ids, mask = fed[-1][0][-1].tolist(), fed[-1][1][-1]  # the longest pair is the last row of the last run
    assert mask.sum() == 512 and len(ids) == 512
    engine.rerank(query, ["x"])
    short = fed[-1][0][0].tolist()[:-2]  # the special tokens and the query, before the passage "x" and the end
    assert ids[: len(short)] == short
    with pytest.raises(
        InvalidRequestError,
        match=rf"document 1 makes a pair of \d+ tokens with the query, over {folder.name}'s maximum of 512 .*Split the",
    ):
        engine.rerank(query, ["short passage", long], on_overflow="error")


def test_a_query_that_leaves_no_room_for_a_passage_is_refused():
    with pytest.raises(
        InvalidRequestError,
        match=r"the query is \d+ tokens; .* no room for a passage .*maximum of 512.*Shorten the query",
    ):
        RerankEngine(BERT).rerank("the vantor lab " * 200, DOCS)


# -- bad input ---------------------------------------------------------------------------------


def test_no_documents_give_an_empty_result():
    result = RerankEngine(BERT).rerank(QUERY, [])
    assert (result.scores, result.ranking, result.shapes, result.padding) == ([], [], [], 0)


@pytest.mark.parametrize(
    ("query", "documents", "message"),
    [
        (None, DOCS, "the query is a NoneType, not a string"),
        (QUERY, "one string", "documents is one string"),
        (QUERY, ["fine", 3], "document 1 is a int, not a string"),
        ("who\ud800", DOCS, r"lone surrogate '\\ud800' at character 3"),
        (QUERY, ["fine", "bad \udcff bytes"], r"lone surrogate '\\udcff' at character 4"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_value(query, documents, message):
    with pytest.raises(InvalidRequestError, match=message):
        RerankEngine(BERT).rerank(query, documents)


def test_odd_unicode_is_scored_like_any_text():
    engine = RerankEngine(XLMR)
    texts = ["cafe\u0301 na\u00efve", "zero\u200bwidth", "ヴァントール 🧪", "\u00a0\u2003", ""]
    result = engine.rerank("Wer leitet das Vantor-Labor?", texts)
    assert len(result.scores) == 5 and all(0.0 < s < 1.0 for s in result.scores)


def test_bad_options_are_typed_errors():
    engine = RerankEngine(BERT)
    with pytest.raises(InvalidRequestError, match="on_overflow 'drop'"):
        engine.rerank(QUERY, DOCS, on_overflow="drop")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="batch_size is 0"):
        engine.rerank(QUERY, DOCS, batch_size=0)
    with pytest.raises(InvalidRequestError, match="activation 'softmax'"):
        RerankPackage.open(BERT, activation="softmax")  # type: ignore[arg-type]


def test_a_model_with_two_labels_is_refused_with_why():
    with pytest.raises(
        UnsupportedModelError,
        match=r"tiny-bert-2-labels has 2 labels \(the graph's logits \['batch_size', 2\]\): it is a classifier, not a relevance model.*cross-encoder/ms-marco-MiniLM-L6-v2",
    ):
        RerankPackage.open(TWO_LABELS)


def test_two_labels_in_the_config_are_refused_when_the_graph_does_not_say(copy_package):
    folder = copy_package(TWO_LABELS)
    model = onnx.load(str(folder / "onnx" / "model.onnx"))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_param = "labels"
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"))
    with pytest.raises(
        UnsupportedModelError, match=r"has 2 labels \(config.json id2label \{'0': 'not_duplicate', '1': 'duplicate'\}\)"
    ):
        RerankPackage.open(folder)


def test_a_folder_without_a_tokenizer(copy_package):
    folder = copy_package(BERT)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(
        MissingTokenizerError, match=r"no tokenizer.json in .*: the reranker engine reads .*save_pretrained"
    ):
        RerankPackage.open(folder)


def test_lfs_pointers_and_missing_folders(copy_package, tmp_path):
    with pytest.raises(ModelNotFoundError, match="reranker folder .* does not exist"):
        RerankPackage.open(tmp_path / "nope")
    folder = copy_package(XLMR)
    (folder / "onnx" / "model.onnx").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 183698\n"
    )
    with pytest.raises(LfsPointerError, match=r"onnx/model.onnx is a Git LFS pointer.*git lfs pull"):
        RerankPackage.open(folder)
    shutil.rmtree(folder / "onnx")
    with pytest.raises(
        ModelNotFoundError,
        match="no ONNX model in .*--task text-classification --model cross-encoder/ms-marco-MiniLM-L6-v2",
    ):
        RerankPackage.open(folder)


def test_an_embedding_model_given_as_a_reranker_says_where_it_goes(copy_package):
    folder = copy_package(FIXTURES / "embeddings" / "tiny-bert-st")
    with pytest.raises(
        UnsupportedModelError, match=r"tiny-bert-st is a BertModel .*not a cross-encoder.*RyzenAIEmbeddings"
    ):
        RerankPackage.open(folder)
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match=r"outputs last_hidden_state .*: none is the logits"):
        RerankPackage.open(folder)
    with pytest.raises(UnsupportedModelError, match="none is per-token hidden states"):
        EmbeddingPackage.open(BERT)  # and the other way round


# -- sharing, command line -----------------------------------------------------------------------


def test_the_engine_is_shared_per_folder_and_settings():
    a = RerankEngine.get(str(BERT))
    assert RerankEngine.get(BERT, idle_timeout=300.0) is a  # a default given or left out: the same engine
    assert RerankEngine.get(BERT, shapes="static") is not a
    assert RerankEngine.get(BERT, activation="identity") is not a


def test_info_describes_a_reranker_folder(capsys):
    from ryzenai_cli.main import main

    assert main(["info", str(XLMR)]) == 0
    out = capsys.readouterr().out
    assert "reranker       tiny-xlmr-reranker" in out and "pairs          <s> query </s> </s> passage </s>" in out
    assert "inputs input_ids, attention_mask; output logits" in out and "max length     512 tokens a pair" in out
    assert main(["info", str(BERT_STATIC), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["kind"], facts["static_shape"], facts["run_shapes"], facts["activation"]) == (
        "reranker",
        [1, 512],
        "static",
        "sigmoid",
    )
    assert (
        facts["architecture"] == "BertForSequenceClassification"
        and facts["pair_template"] == "[CLS] query [SEP] passage [SEP]"
    )
