"""Build the tiny EmbeddingGemma fixture and the reference vectors the tests compare against.

    python scripts/build_embeddinggemma_fixture.py [--out tests/fixtures/embeddings]

Needs the ``fixtures`` extra (torch 2.13.0 CPU, transformers, sentence-transformers, onnx,
onnxscript for the exporter, onnxruntime); the tests need none of them. It writes

    tiny-embeddinggemma/          google/embeddinggemma-300m's sentence-transformers layout at
                                  1/16 of its width, random weights: a Gemma3TextModel backbone
                                  (bidirectional attention, sliding and full layers), mean
                                  pooling, Dense 48->192 and Dense 192->48 without bias, Normalize;
                                  the query/document prompts in config_sentence_transformers.json;
                                  a Gemma-style tokenizer (<bos> text <eos>, byte fallback)
        onnx/model.onnx           inputs input_ids, attention_mask with dynamic (batch_size,
                                  sequence_length) axes; two outputs: last_hidden_state (the
                                  backbone's token embeddings, for pooling and Dense on the host)
                                  and sentence_embedding (the whole pipeline in the graph, as
                                  onnx-community/embeddinggemma-300m-ONNX exports it)
    embeddinggemma-reference.json the texts, the ids transformers' tokenizer gives them (prompt
                                  included) and sentence-transformers' vectors at each Matryoshka
                                  dimension (48, 32, 16, 8: EmbeddingGemma's 768, 512, 256, 128
                                  scaled like the model), truncated then normalised again

Before writing the reference the script checks, on every text alone and on all of them padded
in one batch, that onnxruntime's sentence_embedding and the host pipeline computed with numpy
from last_hidden_state (masked mean, the Dense weights from 2_Dense and 3_Dense, L2) both equal
sentence-transformers' vectors within 1e-5, and that Hugging Face ``tokenizers`` reading
tokenizer.json gives transformers' ids. Deterministic: fixed seeds, a tokenizer trained on the
fixture corpus.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from build_fixtures import byte_fallback_layout  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "embeddings"
CORPUS = ROOT / "scripts" / "fixture_corpus.txt"
NAME = "tiny-embeddinggemma"
SEED = 4096
OPSET = 18
TOLERANCE = 1e-5
VOCAB = 640
#: google/embeddinggemma-300m divided by 16 (its 3 heads and 1 key-value head kept), 4 layers.
SIZE = {
    "hidden_size": 48,
    "intermediate_size": 72,
    "num_hidden_layers": 4,
    "num_attention_heads": 3,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    "max_position_embeddings": 256,
    #: 512 in the real model; short here so the reference texts reach past it.
    "sliding_window": 16,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
}
DENSE = 192  # 3072 / 16
MATRYOSHKA = [48, 32, 16, 8]  # 768, 512, 256, 128 / 16
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
#: The prompts of google/embeddinggemma-300m's config_sentence_transformers.json, as transformers'
#: convert_gemma3_weights.py writes them for the embedding variant.
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}

CARD = """# {name}

A random-weight model in google/embeddinggemma-300m's sentence-transformers layout, built by
`scripts/build_embeddinggemma_fixture.py` (seed {seed}) for the tests of ryzenai-llm's embedding
engine. Its vectors mean nothing; its structure is EmbeddingGemma's at 1/16 of the width:

- backbone: `Gemma3TextModel` ({layers} layers: sliding and full attention, bidirectional, window
  {window}; hidden {hidden}, {heads} heads, 1 key-value head, head dim 16), vocabulary {vocab};
  the backbone's weights are in `onnx/model.onnx` only (no `model.safetensors` at the root);
- `1_Pooling`: mean; `2_Dense`: {hidden} -> {dense}, `3_Dense`: {dense} -> {hidden}, no bias, identity
  activation (weights in their `model.safetensors`); then Normalize;
- `config_sentence_transformers.json`: EmbeddingGemma's prompts (`query`: "task: search result |
  query: ", `document`: "title: none | text: ", and the task prompts);
- Matryoshka dimensions {dims} (EmbeddingGemma's 768, 512, 256, 128 scaled the same way);
- `onnx/model.onnx`: inputs `input_ids`, `attention_mask`, dynamic (batch_size, sequence_length);
  outputs `last_hidden_state` (token embeddings) and `sentence_embedding` (pooled, Dense, Dense,
  normalised: the whole pipeline in the graph, as onnx-community's export has it).

`../embeddinggemma-reference.json` holds sentence-transformers' vectors for the reference texts.

## Matryoshka dimensions

Random weights are trained for nothing; the fixture declares EmbeddingGemma's sizes (scaled) the
way sentence-transformers' model card declares those of a model trained with `MatryoshkaLoss`,
which ryzenai-llm reads (`matryoshka_dims`):

```json
{{
    "loss": "MultipleNegativesRankingLoss",
    "matryoshka_dims": [
{dims_json}
    ],
    "matryoshka_weights": [
{weights_json}
    ],
    "n_dims_per_step": -1
}}
```
"""


def texts() -> list[str]:
    """Reference texts: plain, long (past the sliding window), odd Unicode, a lone word."""
    lines = [ln.strip() for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [
        lines[0][:200],
        " ".join(lines[1:4]),  # well past the 16-token sliding window
        "Wer leitet das Vantor-Labor? Ilsa Brandecott \u2014 directrice (\u30f4\u30a1\u30f3\u30c8\u30fc\u30eb) \U0001f9ea.",
        "cafe\u0301 na\u00efve zero\u200bwidth",
        "x",
    ]


def build_tokenizer(out: Path) -> None:
    """A Gemma-style tokenizer.json: spaces to ``▁``, byte-fallback BPE, ``<bos> $A <eos>`` (EmbeddingGemma adds both)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 256, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator([CORPUS.read_text(encoding="utf-8")] * 4, trainer)
    data = byte_fallback_layout(json.loads(tok.to_str()), SPECIALS, VOCAB)
    data["post_processor"] = json.loads(
        processors.TemplateProcessing(
            single="<bos> $A <eos>",
            pair="<bos> $A <eos> $B <eos>",
            special_tokens=[("<bos>", data["model"]["vocab"]["<bos>"]), ("<eos>", data["model"]["vocab"]["<eos>"])],
        ).__getstate__()
    )
    data["decoder"] = json.loads(
        decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]).__getstate__()
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "padding_side": "right",
        "model_max_length": SIZE["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def sentence_transformer(hf: Path) -> Any:
    """The random Gemma3TextModel saved to ``hf``, wrapped as EmbeddingGemma's pipeline."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import Gemma3TextConfig, Gemma3TextModel

    torch.manual_seed(SEED)
    config = Gemma3TextConfig(
        vocab_size=VOCAB,
        **SIZE,
        use_bidirectional_attention=True,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        initializer_range=0.2,
    )
    backbone = Gemma3TextModel(config).eval()
    with torch.no_grad():  # RMSNorm weights away from zero, so (1 + w) scales are not all 1
        for name, param in backbone.named_parameters():
            if "norm" in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(SEED + len(name))) * 0.1)
    backbone.save_pretrained(hf)
    transformer = models.Transformer(str(hf), max_seq_length=SIZE["max_position_embeddings"])
    pooling = models.Pooling(SIZE["hidden_size"], pooling_mode="mean")
    dense = []
    gen = torch.Generator().manual_seed(SEED + 1)
    for size_in, size_out in ((SIZE["hidden_size"], DENSE), (DENSE, SIZE["hidden_size"])):
        layer = models.Dense(size_in, size_out, bias=False, activation_function=torch.nn.Identity())
        with torch.no_grad():
            layer.linear.weight.copy_(torch.randn(size_out, size_in, generator=gen) * (1.0 / size_in**0.5))
        dense.append(layer)
    model = SentenceTransformer(
        modules=[transformer, pooling, *dense, models.Normalize()], prompts=PROMPTS, device="cpu"
    )
    return model.eval()


def export(st: Any, path: Path) -> None:
    """``torch.onnx.export`` (dynamo, opset 18): outputs last_hidden_state and sentence_embedding."""
    import onnx
    import torch

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.st = st

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.st({"input_ids": input_ids, "attention_mask": attention_mask})
            return out["token_embeddings"], out["sentence_embedding"]

    ids = torch.full((2, 24), 7, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0
    batch = torch.export.Dim("batch_size")
    seq = torch.export.Dim("sequence_length", max=SIZE["max_position_embeddings"])
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        Pipeline().eval(),
        (ids, mask),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "sentence_embedding"],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    saved = onnx.load(str(path))
    del saved.metadata_props[:]  # the exporter's own version strings: the file depends only on the weights
    for node in saved.graph.node:  # and its per-node source locations (two thirds of the file)
        del node.metadata_props[:]
        node.doc_string = ""
    del saved.graph.value_info[:]
    saved.producer_name, saved.producer_version = "pytorch", torch.__version__.split("+")[0]
    onnx.save_model(saved, str(path))


def host_pipeline(hidden: np.ndarray, mask: np.ndarray, folder: Path) -> np.ndarray:
    """Masked mean, 2_Dense, 3_Dense, L2 in numpy: what a runtime that reads last_hidden_state does."""
    from safetensors.numpy import load_file

    m = mask[..., None].astype(np.float64)
    x = (hidden.astype(np.float64) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    for sub in ("2_Dense", "3_Dense"):
        weights = load_file(str(folder / sub / "model.safetensors"))
        x = x @ weights["linear.weight"].astype(np.float64).T
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def check(folder: Path, st: Any, items: list[tuple[str, str]]) -> list[list[int]]:
    """onnxruntime's two paths against sentence-transformers, alone and padded in a batch; the ids."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    want = np.stack([st.encode([t], prompt_name=kind, convert_to_numpy=True)[0] for kind, t in items])
    hf_tok = st.tokenizer
    ids = [hf_tok(PROMPTS[kind] + t)["input_ids"] for kind, t in items]
    for (kind, t), expected in zip(items, ids, strict=True):
        got = tok.encode(PROMPTS[kind] + t).ids
        assert got == expected, f"tokenizers and transformers disagree on {t!r}: {got} vs {expected}"
    longest = max(len(i) for i in ids)
    padded = np.zeros((len(ids), longest), dtype=np.int64)
    mask = np.zeros_like(padded)
    for row, i in enumerate(ids):
        padded[row, : len(i)] = i
        mask[row, : len(i)] = 1
    runs = [(padded, mask)] + [(padded[r : r + 1, : len(i)], mask[r : r + 1, : len(i)]) for r, i in enumerate(ids)]
    batch_hidden, batch_vec = session.run(None, {"input_ids": runs[0][0], "attention_mask": runs[0][1]})
    alone = [session.run(None, {"input_ids": a, "attention_mask": b}) for a, b in runs[1:]]
    graph = np.concatenate([v for _, v in alone])
    host = np.concatenate([host_pipeline(h, b, folder) for (h, _), (_, b) in zip(alone, runs[1:], strict=True)])
    for label, got in (
        ("sentence_embedding, batch", batch_vec),
        ("sentence_embedding, alone", graph),
        ("host pipeline, batch", host_pipeline(batch_hidden, mask, folder)),
        ("host pipeline, alone", host),
    ):
        err = float(np.abs(got - want).max())
        print(f"  {label}: max |onnxruntime - sentence-transformers| = {err:.2e}")
        assert err <= TOLERANCE, f"{label} differs from sentence-transformers by {err:.2e}"
    return ids


def reference(st: Any, items: list[tuple[str, str]], ids: list[list[int]]) -> dict[str, Any]:
    """sentence-transformers' vectors at each Matryoshka dimension, truncated then normalised again."""
    vectors: dict[str, list[list[float]]] = {}
    full = None
    for dims in MATRYOSHKA:
        got = np.stack(
            [
                st.encode([t], prompt_name=kind, truncate_dim=dims, normalize_embeddings=True, convert_to_numpy=True)[0]
                for kind, t in items
            ]
        )
        if full is None:
            full = got
        else:  # the same as cutting the full vector and normalising it again
            cut = full[:, :dims] / np.linalg.norm(full[:, :dims], axis=1, keepdims=True)
            assert float(np.abs(cut - got).max()) <= TOLERANCE
        vectors[str(dims)] = [[float(x) for x in row] for row in got.astype(np.float32)]
    return {
        "model": NAME,
        "source": "sentence-transformers SentenceTransformer.encode(text, prompt_name=kind, truncate_dim=dims, "
        "normalize_embeddings=True) on the fixture's weights",
        "tolerance": TOLERANCE,
        "dimensions": MATRYOSHKA,
        "prompts": {"query": PROMPTS["query"], "document": PROMPTS["document"]},
        "items": [{"kind": kind, "text": t, "input_ids": i} for (kind, t), i in zip(items, ids, strict=True)],
        "vectors": vectors,
    }


def write_layout(folder: Path, saved: Path) -> None:
    """The sentence-transformers files as google/embeddinggemma-300m publishes them (sentence-transformers 5's layout).

    sentence-transformers 6 saves another layout (``sentence_transformers.base.modules...``
    types, ``"pooling_mode": "mean"``, Dense configs with input and output names); the fixture
    keeps the one users download. The tokenizer, config.json and the Dense weights are the ones
    ``saved`` holds.
    """
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(saved / name, folder / name)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 4, "name": "4", "path": "4_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    write_json(folder / "modules.json", modules)
    write_json(
        folder / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": SIZE["hidden_size"],
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
    )
    for sub, (size_in, size_out) in (
        ("2_Dense", (SIZE["hidden_size"], DENSE)),
        ("3_Dense", (DENSE, SIZE["hidden_size"])),
    ):
        write_json(
            folder / sub / "config.json",
            {
                "in_features": size_in,
                "out_features": size_out,
                "bias": False,
                "activation_function": "torch.nn.modules.linear.Identity",
            },
        )
        shutil.copy2(saved / sub / "model.safetensors", folder / sub / "model.safetensors")
    write_json(
        folder / "sentence_bert_config.json",
        {"max_seq_length": SIZE["max_position_embeddings"], "do_lower_case": False},
    )
    write_json(
        folder / "config_sentence_transformers.json",
        {
            "model_type": "SentenceTransformer",
            "prompts": PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )


def write_card(folder: Path) -> None:
    """The fixture's README.md: what it is, and its Matryoshka dimensions as sentence-transformers' card names them."""
    indent = " " * 8
    (folder / "README.md").write_text(
        CARD.format(
            name=NAME,
            seed=SEED,
            layers=SIZE["num_hidden_layers"],
            window=SIZE["sliding_window"],
            hidden=SIZE["hidden_size"],
            heads=SIZE["num_attention_heads"],
            vocab=VOCAB,
            dense=DENSE,
            dims=", ".join(map(str, MATRYOSHKA)),
            dims_json=",\n".join(f"{indent}{d}" for d in MATRYOSHKA),
            weights_json=",\n".join(f"{indent}1" for _ in MATRYOSHKA),
        ),
        encoding="utf-8",
    )


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build(out: Path) -> None:
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    folder = out / NAME
    items = [(kind, t) for t in texts() for kind in ("query", "document")]
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        build_tokenizer(hf)
        saved = Path(tmp) / "st"
        sentence_transformer(hf).save(str(saved))
        shutil.rmtree(folder, ignore_errors=True)
        write_layout(folder, saved)
        # The reference comes from sentence-transformers reading the fixture's own files (the
        # backbone's weights added back): the layout is checked as users' copies are read.
        loaded = Path(tmp) / "loaded"
        shutil.copytree(folder, loaded)
        shutil.copy2(saved / "model.safetensors", loaded / "model.safetensors")
        st = SentenceTransformer(str(loaded), device="cpu").eval()
        assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"], list(st)
        assert st.prompts["query"] == PROMPTS["query"] and st.prompts["document"] == PROMPTS["document"]
        export(st, folder / "onnx" / "model.onnx")
        print(f"checking {folder} ({len(items)} texts)")
        ids = check(folder, st, items)
        ref = reference(st, items, ids)
    write_card(folder)
    ref["built_with"] = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
    }
    write_json(out / "embeddinggemma-reference.json", ref)
    print(f"wrote {folder} and {out / 'embeddinggemma-reference.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default: tests/fixtures/embeddings)")
    build(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
