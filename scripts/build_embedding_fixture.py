"""Build the tiny BERT embedding fixtures, or convert a real BERT checkpoint to the same ONNX graph.

The graph is written directly with the ``onnx`` package (opset 17: Gather, MatMul,
LayerNormalization, Softmax, Erf GELU), so neither this script nor the tests need torch:

    python scripts/build_embedding_fixture.py
        tests/fixtures/embeddings/tiny-bert-st      sentence-transformers layout: onnx/model.onnx with
                                                    dynamic (batch, sequence) axes, mean pooling, Normalize
        tests/fixtures/embeddings/tiny-bert-static  AMD's layout: one model.onnx with a static (1, 128)
                                                    shape, CLS pooling, same weights

    python scripts/build_embedding_fixture.py --from-safetensors DIR --out OUT [--check]
        a BERT sentence-transformers folder with model.safetensors (all-MiniLM-L6-v2, BGE) ->
        OUT with onnx/model.onnx (dynamic axes) and the folder's tokenizer and pooling files;
        --check compares the graph with transformers' BertModel on the same weights (needs the
        `fixtures` extra: torch, transformers). On all-MiniLM-L6-v2: hidden states within 2.5e-6,
        mean-pooled L2-normalised vectors within 1.5e-7.

Deterministic: a fixed seed, a word-piece vocabulary taken in a fixed order from the demo
documents, and protobuf output that depends only on the weights.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "embeddings"
DOCS = ROOT / "cli" / "demo_docs"
SEED = 1616
OPSET = 17
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class Bert:
    """Weights of a BERT encoder, named as Hugging Face names them (without the ``bert.`` prefix)."""

    def __init__(self, weights: dict[str, np.ndarray], layers: int, heads: int, eps: float) -> None:
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
        self.layers, self.heads, self.eps = layers, heads, eps

    @property
    def hidden(self) -> int:
        return int(self.w["embeddings.word_embeddings.weight"].shape[1])


def random_bert(vocab: int, hidden: int, layers: int, heads: int, inter: int, positions: int, seed: int) -> Bert:
    rng = np.random.default_rng(seed)

    def n(*shape: int, std: float = 0.2) -> np.ndarray:
        return rng.normal(0.0, std, shape).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": n(vocab, hidden, std=1.0),
        "embeddings.position_embeddings.weight": n(positions, hidden, std=0.3),
        "embeddings.token_type_embeddings.weight": n(2, hidden, std=0.1),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            w[p + name + ".weight"] = n(hidden, hidden)
            w[p + name + ".bias"] = n(hidden, std=0.02)
        w[p + "intermediate.dense.weight"] = n(inter, hidden)
        w[p + "intermediate.dense.bias"] = n(inter, std=0.02)
        w[p + "output.dense.weight"] = n(hidden, inter)
        w[p + "output.dense.bias"] = n(hidden, std=0.02)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = (1.0 + n(hidden, std=0.05)).astype(np.float32)
            w[p + ln + ".bias"] = n(hidden, std=0.02)
    return Bert(w, layers, heads, 1e-12)


def bert_graph(bert: Bert, *, batch: int | str, seq: int | str, name: str) -> onnx.ModelProto:
    """BERT's encoder as one ONNX graph: (input_ids, attention_mask, token_type_ids) -> last_hidden_state."""
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    count = [0]

    def const(arr: np.ndarray | list[int] | float, label: str = "c") -> str:
        count[0] += 1
        tname = f"{label}_{count[0]}"
        inits.append(numpy_helper.from_array(np.asarray(arr), tname))
        return tname

    def weight(key: str, transpose: bool = False) -> str:
        arr = bert.w[key].T.copy() if transpose else bert.w[key]
        inits.append(numpy_helper.from_array(arr, key))
        return key

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        count[0] += 1
        out = f"{kind.lower()}_{count[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], name=f"{kind}_{count[0]}", **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        return op("Add", [op("MatMul", [x, weight(prefix + ".weight", transpose=True)]), weight(prefix + ".bias")])

    def layer_norm(x: str, prefix: str) -> str:
        return op(
            "LayerNormalization", [x, weight(prefix + ".weight"), weight(prefix + ".bias")], axis=-1, epsilon=bert.eps
        )

    hidden, heads = bert.hidden, bert.heads
    head_dim = hidden // heads
    word = op("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"])
    seq_len = op("Gather", [op("Shape", ["input_ids"]), const(np.array(1, np.int64), "axis1")], axis=0)
    positions = op("Range", [const(np.array(0, np.int64), "zero"), seq_len, const(np.array(1, np.int64), "one")])
    pos = op("Gather", [weight("embeddings.position_embeddings.weight"), positions])
    types = op("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"])
    x = layer_norm(op("Add", [op("Add", [word, pos]), types]), "embeddings.LayerNorm")

    # Additive mask as Hugging Face builds it: (1 - mask) * float32 min, shape (batch, 1, 1, seq).
    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = op("Sub", [const(np.array(1.0, np.float32), "one_f"), mask])
    additive = op("Mul", [inverted, const(np.array(np.finfo(np.float32).min, np.float32), "fmin")])
    additive = op("Unsqueeze", [additive, const(np.array([1, 2], np.int64), "axes12")])
    split_shape = const(np.array([0, 0, heads, head_dim], np.int64), "split")
    merge_shape = const(np.array([0, 0, hidden], np.int64), "merge")
    scale = const(np.array(1.0 / np.sqrt(head_dim), np.float32), "scale")

    for i in range(bert.layers):
        p = f"encoder.layer.{i}."

        def heads_of(t: str) -> str:
            return op("Transpose", [op("Reshape", [t, split_shape])], perm=[0, 2, 1, 3])

        q = heads_of(linear(x, p + "attention.self.query"))
        k = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.key"), split_shape])], perm=[0, 2, 3, 1])
        v = heads_of(linear(x, p + "attention.self.value"))
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), additive])
        probs = op("Softmax", [scores], axis=-1)
        context = op("Reshape", [op("Transpose", [op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge_shape])
        attn = linear(context, p + "attention.output.dense")
        x = layer_norm(op("Add", [x, attn]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        erf = op("Erf", [op("Mul", [h, const(np.array(1.0 / np.sqrt(2.0), np.float32), "rsqrt2")])])
        gelu = op(
            "Mul",
            [
                op("Mul", [h, const(np.array(0.5, np.float32), "half")]),
                op("Add", [erf, const(np.array(1.0, np.float32), "one_g")]),
            ],
        )
        ff = linear(gelu, p + "output.dense")
        x = layer_norm(op("Add", [x, ff]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))

    inputs = [
        helper.make_tensor_value_info(n_, TensorProto.INT64, [batch, seq])
        for n_ in ("input_ids", "attention_mask", "token_type_ids")
    ]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])
    graph = helper.make_graph(nodes, name, inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ryzenai-llm")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_tokenizer(vocab_size: int, max_length: int) -> Any:
    """A lower-casing word-piece tokenizer: specials, characters, then the demo documents' words."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    text = " ".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.txt"))).lower()
    chars = sorted(set(re.sub(r"\s", "", text)) | set("abcdefghijklmnopqrstuvwxyz0123456789.,?!'-:;()"))
    vocab: list[str] = SPECIALS + chars + ["##" + c for c in chars]
    counts: dict[str, int] = {}
    for word in re.findall(r"\w+", text):
        counts[word] = counts.get(word, 0) + 1
    for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(vocab) >= vocab_size:
            break
        if word not in vocab:
            vocab.append(word)
    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok, len(vocab)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _pooling(dim: int, mode: str) -> dict[str, Any]:
    return {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }


MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]

CARD = """# {name}

A random-weight BERT encoder ({layers} layers, hidden {hidden}, {heads} heads, vocabulary {vocab},
{positions} positions) built by `scripts/build_embedding_fixture.py` (seed {seed}) for the tests of
ryzenai-llm's embedding engine. Its vectors mean nothing: it exists to check shapes, pooling,
normalisation, padding and batching on a real ONNX graph. {layout}
"""


def build_fixtures(out: Path) -> None:
    positions, max_length = 128, 128
    tok, vocab = build_tokenizer(600, max_length)
    bert = random_bert(vocab, hidden=32, layers=2, heads=4, inter=64, positions=positions, seed=SEED)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": bert.hidden,
        "num_hidden_layers": bert.layers,
        "num_attention_heads": bert.heads,
        "intermediate_size": 64,
        "max_position_embeddings": positions,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "layer_norm_eps": bert.eps,
        "hidden_act": "gelu",
        "pad_token_id": 0,
    }
    tok_config = {
        "model_max_length": max_length,
        "do_lower_case": True,
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "mask_token": "[MASK]",
        "tokenizer_class": "BertTokenizer",
    }
    facts = {
        "layers": bert.layers,
        "hidden": bert.hidden,
        "heads": bert.heads,
        "vocab": vocab,
        "positions": positions,
        "seed": SEED,
    }

    st = out / "tiny-bert-st"
    shutil.rmtree(st, ignore_errors=True)
    (st / "onnx").mkdir(parents=True)
    onnx.save_model(
        bert_graph(bert, batch="batch_size", seq="sequence_length", name="tiny-bert"), st / "onnx" / "model.onnx"
    )
    tok.save(str(st / "tokenizer.json"))
    _write_json(st / "config.json", config)
    _write_json(st / "tokenizer_config.json", tok_config)
    _write_json(st / "modules.json", MODULES)
    _write_json(st / "1_Pooling" / "config.json", _pooling(bert.hidden, "mean"))
    _write_json(st / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    (st / "README.md").write_text(
        CARD.format(
            name="tiny-bert-st",
            layout="Laid out as Hugging Face ships sentence-transformers "
            "models: `onnx/model.onnx` with dynamic (batch, sequence) axes, mean pooling, then Normalize.",
            **facts,
        ),
        encoding="utf-8",
    )

    static = out / "tiny-bert-static"
    shutil.rmtree(static, ignore_errors=True)
    static.mkdir(parents=True)
    onnx.save_model(bert_graph(bert, batch=1, seq=max_length, name="tiny-bert-static"), static / "model.onnx")
    tok.save(str(static / "tokenizer.json"))
    _write_json(static / "config.json", config)
    _write_json(static / "tokenizer_config.json", tok_config)
    _write_json(static / "1_Pooling" / "config.json", _pooling(bert.hidden, "cls"))
    (static / "README.md").write_text(
        CARD.format(
            name="tiny-bert-static",
            layout="Laid out as AMD's NPU examples export BERT encoders: one "
            f"`model.onnx` with a static (1, {max_length}) shape (same weights as tiny-bert-st), CLS pooling.",
            **facts,
        ),
        encoding="utf-8",
    )
    print(f"wrote {st} and {static}")


def convert_safetensors(src: Path, out: Path) -> None:
    """A sentence-transformers BERT folder (model.safetensors) -> out/onnx/model.onnx and its other files."""
    from safetensors.numpy import load_file

    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    raw = load_file(str(src / "model.safetensors"))
    weights = {k.removeprefix("bert."): v for k, v in raw.items() if not k.startswith(("pooler.", "bert.pooler."))}
    bert = Bert(
        weights, config["num_hidden_layers"], config["num_attention_heads"], config.get("layer_norm_eps", 1e-12)
    )
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    model = bert_graph(bert, batch="batch_size", seq="sequence_length", name=src.name)
    onnx.save_model(model, out / "onnx" / "model.onnx")
    for item in src.iterdir():
        if item.suffix in (".safetensors", ".bin", ".h5", ".msgpack", ".onnx") or item.name == "onnx":
            continue
        dst = out / item.name
        if item.is_dir():
            shutil.copytree(item, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dst)
    print(f"wrote {out / 'onnx' / 'model.onnx'}")


def check_against_transformers(src: Path, model_file: Path) -> None:
    """Print the largest differences between the graph and transformers' BertModel."""
    import onnxruntime as ort
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    ref = AutoModel.from_pretrained(src).eval()
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The Orsk Foundry is in Tamberlow. " * 6,
        "hi",
    ]
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        want = ref(**batch).last_hidden_state.numpy()
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    got = session.run(["last_hidden_state"], {k: v.numpy() for k, v in batch.items()})[0]
    mask = batch["attention_mask"].numpy()[..., None]

    def pooled(x: np.ndarray) -> np.ndarray:
        v = (x * mask).sum(1) / mask.sum(1)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    print(f"hidden states: max |difference| {np.abs((want - got) * mask).max():.2e} on real tokens")
    print(f"pooled vectors: max |difference| {np.abs(pooled(want) - pooled(got)).max():.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="output folder (default: tests/fixtures/embeddings)")
    parser.add_argument("--from-safetensors", type=Path, metavar="DIR", help="convert this BERT folder instead")
    parser.add_argument("--check", action="store_true", help="compare the conversion with transformers' BertModel")
    args = parser.parse_args()
    if args.from_safetensors:
        if args.out is None:
            parser.error("--from-safetensors needs --out")
        convert_safetensors(args.from_safetensors, args.out)
        if args.check:
            check_against_transformers(args.from_safetensors, args.out / "onnx" / "model.onnx")
    else:
        build_fixtures(args.out or OUT)


if __name__ == "__main__":
    main()
