"""Build the tiny cross-encoder (reranker) fixtures and the reference scores the tests compare against.

    python scripts/build_rerank_fixture.py [--out tests/fixtures/rerank]

Needs the ``fixtures`` extra (torch 2.13.0 CPU, transformers, onnx, onnxruntime) and
sentence-transformers for the reference; the tests need none of them. It writes, each folder
laid out as Hugging Face ships cross-encoders (``config.json`` with the architecture and
``num_labels``/``id2label``, ``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``, ``onnx/model.onnx``):

    tiny-bert-cross-encoder          BertForSequenceClassification, one label, a word-piece
                                     tokenizer pairing ``[CLS] q [SEP] p [SEP]`` (token_type_ids 0
                                     then 1); inputs input_ids, attention_mask, token_type_ids;
                                     dynamic (batch_size, sequence_length) axes; config.json names
                                     sentence-transformers' Sigmoid activation, as
                                     cross-encoder/ms-marco-MiniLM-L6-v2 does
    tiny-bert-cross-encoder-static   the same weights exported with a static (1, 512) shape
    tiny-xlmr-reranker               XLMRobertaForSequenceClassification, one label, a unigram
                                     tokenizer pairing ``<s> q </s></s> p </s>``; inputs input_ids,
                                     attention_mask (no token_type_ids), as BAAI/bge-reranker-base
    tiny-xlmr-reranker-static        the same weights, static (1, 512)
    tiny-bert-2-labels               a two-label BertForSequenceClassification (a classifier, not a
                                     relevance model: the reranker refuses it)
    reference.json                   the pairs, the ids transformers' tokenizer gives them
                                     (``truncation="only_second"``, max_length 512), transformers'
                                     ``*ForSequenceClassification`` logits and sentence-transformers'
                                     ``CrossEncoder.predict`` scores on the same weights

The script checks, before it writes reference.json, that onnxruntime's logits on each ONNX file
equal transformers' (within 2e-5, each pair alone at its own length and all pairs padded in one
batch) and that ``CrossEncoder.predict`` is the sigmoid of those logits. Deterministic: fixed
seeds, vocabularies from the demo documents in a fixed order.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from build_embedding_fixture import DOCS, build_tokenizer  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "rerank"
SEED = 3030
OPSET = 17
MAX_LENGTH = 512
TOLERANCE = 2e-5
SIZE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
#: Spread the random weights wider than transformers' default (0.02), so logits differ by more than noise.
INIT_RANGE = 0.25
SIGMOID = {"activation_fn": "torch.nn.modules.activation.Sigmoid", "version": "4.0.2"}
XLMR_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]

CARD = """# {name}

A random-weight {arch} ({layers} layers, hidden {hidden}, {heads} heads, vocabulary {vocab},
{labels} label(s)) built by `scripts/build_rerank_fixture.py` (seed {seed}) for the tests of
ryzenai-llm's reranker. Its scores mean nothing: it exists to check pair encoding, truncation,
padding, batching and scoring on a real ONNX graph exported by `torch.onnx.export` from
transformers. {layout}
"""


def _queries_and_passages() -> tuple[list[str], list[str]]:
    questions = json.loads((DOCS / "questions.json").read_text(encoding="utf-8"))["questions"]
    passages = [p.read_text(encoding="utf-8").strip() for p in sorted(DOCS.glob("*.txt"))]
    return [q["question"] for q in questions], passages


def reference_pairs() -> list[list[str]]:
    """(query, passage) pairs: demo questions against documents, a passage over 512 tokens, odd Unicode."""
    queries, passages = _queries_and_passages()
    pairs = [[q, p] for q in queries[:3] for p in passages[:4]]
    pairs.append([queries[0], " ".join(passages * 6)])  # over the maximum: only the passage is cut
    pairs.append(
        ["Wer leitet das Vantor-Labor?", "Ilsa Brandecott — directrice du laboratoire Vantor (ヴァントール) 🧪."]
    )
    pairs.append(["cafe\u0301 na\u00efve", "zero\u200bwidth and combining a\u0308 characters"])
    pairs.append(["vantor", "x"])
    return pairs


def bert_tokenizer() -> Any:
    tok, _ = build_tokenizer(600, MAX_LENGTH)
    tok.no_truncation()
    tok.no_padding()
    return tok


def xlmr_tokenizer() -> Any:
    """A small unigram tokenizer with XLM-RoBERTa's special tokens, pre-tokenizer and pair template.

    The vocabulary is written, not trained (tokenizers' unigram trainer breaks ties differently
    from run to run): the specials, every character alone and word-initial, then the demo
    documents' words, scored by their log frequency so that a known word is one piece.
    """
    import re

    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import Unigram

    queries, passages = _queries_and_passages()
    text = " ".join([*passages, *queries])
    chars = sorted(set(re.sub(r"\s", "", text)) | set("abcdefghijklmnopqrstuvwxyz0123456789.,?!'-:;()"))
    counts: dict[str, int] = {}
    for word in re.findall(r"\w+", text):
        counts[word] = counts.get(word, 0) + 1
    total = sum(counts.values())
    vocab: list[tuple[str, float]] = [(t, 0.0) for t in XLMR_SPECIALS]
    vocab += [("▁", -8.0)] + [(c, -10.0) for c in chars] + [("▁" + c, -9.0) for c in chars]
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:300]:
        if len(word) > 1:
            vocab.append(("▁" + word, round(math.log(n / total), 6)))
    vocab.append(("<mask>", 0.0))
    tok = Tokenizer(Unigram(vocab, unk_id=3, byte_fallback=False))
    # The pipeline transformers' XLMRobertaTokenizer builds around a unigram vocabulary; without a
    # sentencepiece model there is no precompiled (NFKC) normalizer.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.add_special_tokens([t for t, _ in vocab[:4]] + ["<mask>"])
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    assert (bos, tok.token_to_id("<pad>"), eos, tok.token_to_id("<unk>")) == (0, 1, 2, 3)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    return tok


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _tokenizer_files(folder: Path, tok: Any, family: str) -> None:
    tok.save(str(folder / "tokenizer.json"))
    if family == "bert":
        specials = {
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "mask_token": "[MASK]",
        }
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": True,
            "strip_accents": None,
            "tokenize_chinese_chars": True,
        }
    else:
        specials = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "mask_token": "<mask>",
        }
        config = {"tokenizer_class": "XLMRobertaTokenizer"}
    _write_json(
        folder / "tokenizer_config.json",
        {**config, **specials, "model_max_length": MAX_LENGTH, "clean_up_tokenization_spaces": True},
    )
    _write_json(folder / "special_tokens_map.json", specials)


def build_model(family: str, vocab: int, labels: int, seed: int) -> Any:
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
    )

    torch.manual_seed(seed)
    id2label = {0: "LABEL_0"} if labels == 1 else {0: "not_duplicate", 1: "duplicate"}
    common = {
        **SIZE,
        "vocab_size": vocab,
        "num_labels": labels,
        "id2label": id2label,
        "label2id": {v: k for k, v in id2label.items()},
        "initializer_range": INIT_RANGE,
        "attn_implementation": "eager",
        "hidden_act": "gelu",
    }
    if family == "bert":
        model = BertForSequenceClassification(
            BertConfig(**common, max_position_embeddings=MAX_LENGTH, type_vocab_size=2, pad_token_id=0)
        )
    else:
        # XLM-RoBERTa numbers positions from pad_token_id + 1: 512 tokens need 514 position rows.
        config = XLMRobertaConfig(
            **common,
            max_position_embeddings=MAX_LENGTH + 2,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        )
        model = XLMRobertaForSequenceClassification(config)
    return model.eval()


def _inputs(family: str) -> list[str]:
    return ["input_ids", "attention_mask", "token_type_ids"] if family == "bert" else ["input_ids", "attention_mask"]


def export(model: Any, family: str, path: Path, static: bool) -> None:
    """``torch.onnx.export`` (the dynamo exporter, opset 17): dynamic (batch_size, sequence_length) axes, or (1, 512)."""
    import onnx
    import torch

    names = _inputs(family)
    shape = (1, MAX_LENGTH) if static else (2, 16)
    ids = torch.full(shape, 5, dtype=torch.long)
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    dynamic = None
    if not static:
        batch, seq = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length", max=MAX_LENGTH)
        dynamic = {n: {0: batch, 1: seq} for n in names}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        tuple(feeds[n] for n in names),
        str(path),
        input_names=names,
        output_names=["logits"],
        dynamic_shapes=dynamic,
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    saved = onnx.load(str(path))
    del saved.metadata_props[:]  # the exporter's own version strings: the file depends only on the weights
    saved.producer_name, saved.producer_version = "pytorch", torch.__version__.split("+")[0]
    onnx.save_model(saved, str(path))


def _encode(tok: Any, pairs: list[list[str]]) -> Any:
    return tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="only_second", max_length=MAX_LENGTH)


def check(folder: Path, model: Any, family: str, pairs: list[list[str]], static: bool) -> dict[str, Any]:
    """Compare onnxruntime on the folder's graph with transformers' model; return the reference entry."""
    import onnxruntime as ort
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    enc = _encode(tok, pairs)
    own = Tokenizer.from_file(str(folder / "tokenizer.json"))
    own.enable_truncation(MAX_LENGTH, strategy="only_second")
    for i, (query, passage) in enumerate(pairs):  # tokenizer.json pairs texts as transformers does
        assert own.encode(query, passage).ids == enc["input_ids"][i], f"{folder.name}: pair {i} is encoded differently"
    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = _inputs(family)
    pad = model.config.pad_token_id
    want, got = [], []
    for i in range(len(pairs)):
        row = {n: torch.tensor([enc[n][i]]) for n in names}
        with torch.no_grad():
            want.append(float(model(**row).logits[0, 0]))
        n = len(enc["input_ids"][i])
        width = MAX_LENGTH if static else n
        feeds = {}
        for name in names:
            arr = np.full((1, width), pad if name == "input_ids" else 0, np.int64)
            arr[0, :n] = enc[name][i]
            feeds[name] = arr
        got.append(float(session.run(["logits"], feeds)[0][0, 0]))
    worst = max(abs(a - b) for a, b in zip(want, got, strict=True))
    assert worst < TOLERANCE, f"{folder.name}: onnxruntime differs from transformers by {worst:.2e}"
    if not static:
        batch = tok(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            truncation="only_second",
            max_length=MAX_LENGTH,
            padding=True,
            return_tensors="np",
        )
        padded = session.run(["logits"], {n: batch[n].astype(np.int64) for n in names})[0][:, 0]
        worst_padded = float(np.abs(padded - np.array(want)).max())
        assert worst_padded < TOLERANCE, f"{folder.name}: a padded batch differs by {worst_padded:.2e}"
    print(f"{folder.name}: onnxruntime vs transformers, max |difference| {worst:.2e}")
    return {"input_ids": enc["input_ids"], "token_type_ids": enc.get("token_type_ids"), "logits": want}


def cross_encoder_scores(model: Any, tok_folder: Path, pairs: list[list[str]]) -> list[float]:
    """sentence-transformers' ``CrossEncoder.predict`` on the same weights and tokenizer."""
    from sentence_transformers import CrossEncoder

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(tok_folder / name, Path(tmp) / name)
        config = json.loads((tok_folder / "config.json").read_text(encoding="utf-8"))
        saved = json.loads((Path(tmp) / "config.json").read_text(encoding="utf-8"))
        if "sentence_transformers" in config:
            saved["sentence_transformers"] = config["sentence_transformers"]
            (Path(tmp) / "config.json").write_text(json.dumps(saved), encoding="utf-8")
        encoder = CrossEncoder(tmp, max_length=MAX_LENGTH, device="cpu")
        return [float(s) for s in encoder.predict([tuple(p) for p in pairs], batch_size=4)]


def _config(model: Any, activation: bool) -> dict[str, Any]:
    import transformers

    config = model.config.to_dict()
    for key in (
        "_attn_implementation_autoset",
        "dtype",
        "torch_dtype",
        "transformers_version",
        "_name_or_path",
        "attn_implementation",
        "output_attentions",
    ):
        config.pop(key, None)
    config["architectures"] = [type(model).__name__]
    config["transformers_version"] = transformers.__version__
    if activation:
        config["sentence_transformers"] = SIGMOID
    return dict(sorted(config.items()))


def build(out: Path) -> None:
    pairs = reference_pairs()
    reference: dict[str, Any] = {"max_length": MAX_LENGTH, "truncation": "only_second", "pairs": pairs, "models": {}}
    tokenizers = {"bert": bert_tokenizer(), "xlmr": xlmr_tokenizer()}
    plan = [
        ("tiny-bert-cross-encoder", "bert", 1, SEED),
        ("tiny-xlmr-reranker", "xlmr", 1, SEED + 1),
        ("tiny-bert-2-labels", "bert", 2, SEED + 2),
    ]
    for name, family, labels, seed in plan:
        tok = tokenizers[family]
        model = build_model(family, tok.get_vocab_size(), labels, seed)
        for static in (False, True) if labels == 1 else (False,):
            folder = out / (name + ("-static" if static else ""))
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            _tokenizer_files(folder, tok, family)
            _write_json(folder / "config.json", _config(model, activation=family == "bert" and labels == 1))
            export(model, family, folder / "onnx" / "model.onnx", static)
            arch = type(model).__name__
            shape = f"a static (1, {MAX_LENGTH}) shape" if static else "dynamic (batch_size, sequence_length) axes"
            layout = f"Laid out as Hugging Face ships cross-encoders: `onnx/model.onnx` with {shape}, inputs {', '.join(_inputs(family))}, output logits."
            (folder / "README.md").write_text(
                CARD.format(
                    name=folder.name,
                    arch=arch,
                    layers=SIZE["num_hidden_layers"],
                    hidden=SIZE["hidden_size"],
                    heads=SIZE["num_attention_heads"],
                    vocab=tok.get_vocab_size(),
                    labels=labels,
                    seed=seed,
                    layout=layout,
                ),
                encoding="utf-8",
            )
            if labels != 1:
                continue
            entry = check(folder, model, family, pairs, static)
            if static:
                dynamic = reference["models"][name]
                assert entry == {k: dynamic[k] for k in entry}, (
                    f"{folder.name}: the static export reads pairs differently"
                )
                continue
            scores = cross_encoder_scores(model, folder, pairs)
            sigmoid = [1 / (1 + math.exp(-x)) for x in entry["logits"]]
            worst = max(abs(a - b) for a, b in zip(scores, sigmoid, strict=True))
            assert worst < 1e-6, f"{name}: CrossEncoder.predict is not the sigmoid of the logits ({worst:.2e})"
            entry["scores"] = scores
            reference["models"][name] = entry
            print(
                f"{name}: CrossEncoder.predict = sigmoid(logits) within {worst:.1e}; scores {min(scores):.3f}..{max(scores):.3f}"
            )
    _write_json(out / "reference.json", reference)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default: tests/fixtures/rerank)")
    build(parser.parse_args().out)


if __name__ == "__main__":
    main()
