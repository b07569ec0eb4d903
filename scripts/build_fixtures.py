"""Build the tiny real OGA models and the Ryzen AI replica folders used by tests and the demo.

Offline and deterministic: random-weight Hugging Face checkpoints (fixed seed) with a
byte-level BPE tokenizer trained on ``scripts/fixture_corpus.txt``, exported with
onnxruntime-genai's own model builder (int4, CPU), then given the real chat template of
their family. Byte tokens that are not valid UTF-8 on their own get a -1e4 logit bias in the
graph, so random output is always valid text.

Needs the ``fixtures`` extra (torch, transformers, tokenizers, onnx_ir, peft); tests and CI do not:
the outputs are committed.

    python scripts/build_fixtures.py            # models + replicas (about a minute)
                                                # (tiny-gemma3-vision: scripts/build_gemma3_vision.py)
    python scripts/build_fixtures.py --bench    # also the ~30M-parameter benchmark model
    python scripts/build_fixtures.py --tokenizers-only   # only tests/fixtures/tokenizers (seconds)

tests/fixtures/tokenizers/sentencepiece-llama2 is a SentencePiece-style tokenizer as Llama 2,
Mistral and Phi-3 ship it (``▁`` word prefix from a Metaspace pre-tokenizer, byte fallback,
a decoder that strips the leading space): tests put it beside tiny-llama's weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "scripts" / "fixture_corpus.txt"
TEMPLATES = ROOT / "core" / "templates"
TOKENIZERS = ROOT / "tests" / "fixtures" / "tokenizers"
MODELS = ROOT / "tests" / "fixtures" / "models"
REPLICAS = ROOT / "tests" / "fixtures" / "replicas"
EMBEDDED = ROOT / "core" / "models"
SEED = 1234
VOCAB = 1024


@dataclass
class Family:
    name: str
    arch: str  # transformers class name
    model_type: str
    template: str
    specials: list[str]
    bos: str | None
    eos: str  # tokenizer eos_token
    eos_ids: list[str]  # tokens that end generation (genai_config eos_token_id)
    pad: str
    tokenizer_config: dict = field(default_factory=dict)


LLAMA = Family(
    name="llama",
    arch="LlamaForCausalLM",
    model_type="llama",
    template="llama-3.2-instruct.jinja",
    specials=[
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
        "<|finetune_right_pad_id|>",
    ],
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    eos_ids=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
    pad="<|finetune_right_pad_id|>",
)
QWEN3 = Family(
    name="qwen3",
    arch="Qwen3ForCausalLM",
    model_type="qwen3",
    template="qwen3.jinja",
    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    bos=None,
    eos="<|im_end|>",
    eos_ids=["<|im_end|>", "<|endoftext|>"],
    pad="<|endoftext|>",
    tokenizer_config={"add_bos_token": False},
)
# Qwen3's tool and thinking markers are added tokens that are not "special" (they decode).
QWEN3_ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
GEMMA3 = Family(
    name="gemma3",
    arch="LlamaForCausalLM",  # the replica's text decoder; see the Gemma replica notes
    model_type="gemma3",
    template="gemma-3-it.jinja",
    specials=[
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ],
    bos="<bos>",
    eos="<eos>",
    eos_ids=["<eos>", "<end_of_turn>"],
    pad="<pad>",
    tokenizer_config={"add_bos_token": True, "add_eos_token": False},
)


EMBEDDED_CARD = """# tiny-random-llama

A Llama-3.2-style model with random weights (hidden 128, 2 layers, vocab 1024, int4), built
offline by `scripts/build_fixtures.py`. It exercises the whole pipeline (chat template,
tokenizer, budget, streaming) without downloading anything, but its text is noise: it was
never trained. Plain ONNX: runs on the CPU build of onnxruntime-genai.
"""


def log(msg: str) -> None:
    print(f"[fixtures] {msg}", flush=True)


def train_tokenizer(fam: Family, out: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - (len(QWEN3_ADDED) if fam is QWEN3 else 0),
        special_tokens=fam.specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = CORPUS.read_text(encoding="utf-8")
    tok.train_from_iterator([text] * 4, trainer)
    if fam is QWEN3:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED])
    tok.save(str(out / "tokenizer.json"))


def byte_fallback_layout(data: dict, specials: list[str], vocab: int) -> dict:
    """A trained BPE tokenizer.json (as a dict) laid out as SentencePiece models are: the specials,
    the 256 ``<0xNN>`` byte tokens, then the trained pieces; cut to ``vocab``, merges kept only
    between pieces that remain, added tokens renumbered."""
    trained = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    order = [*specials, *(f"<0x{b:02X}>" for b in range(256)), *(p for p, _ in trained if p not in specials)]
    data["model"]["vocab"] = {p: i for i, p in enumerate(order[:vocab])}
    keep = set(data["model"]["vocab"])
    data["model"]["merges"] = [
        m for m in data["model"]["merges"] if ("".join(m) if isinstance(m, list) else m.replace(" ", "")) in keep
    ]
    for added in data["added_tokens"]:
        added["id"] = data["model"]["vocab"][added["content"]]
    return data


def train_sentencepiece_tokenizer(out: Path, vocab: int = VOCAB) -> None:
    """A Llama 2 style tokenizer: ``<unk> <s> </s>``, the 256 ``<0xNN>`` byte tokens, then BPE pieces.

    Trained on the fixture corpus with a Metaspace pre-tokenizer (``▁`` before each word,
    prepended to the first), byte fallback, and Hugging Face's Llama 2 decoder (``▁`` to a
    space, bytes, fuse, strip one leading space). Ids fit tiny-llama's vocabulary.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=vocab - 256, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([CORPUS.read_text(encoding="utf-8")] * 4, trainer)
    data = byte_fallback_layout(json.loads(tok.to_str()), specials, vocab)
    data["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def invalid_utf8_ids(tokenizer_json: Path) -> list[int]:
    """Ids of tokens whose bytes are not valid UTF-8 on their own."""
    from tokenizers import pre_tokenizers  # noqa: F401  (only to assert the extra is present)

    from ryzenai_core.generation.token_bytes import TokenBytes  # the engine's own reading of a tokenizer's bytes

    table = TokenBytes.from_tokenizer_json(tokenizer_json)
    if table is None:
        raise ValueError(f"{tokenizer_json} is not a byte-level or byte-fallback vocabulary")
    bad = []
    for idx, piece in enumerate(table.table):
        try:
            piece.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(idx)
    return bad


def add_logit_bias(model_dir: Path, ids: list[int], vocab: int) -> None:
    """Append ``logits += bias`` to the graph, bias -1e4 on ``ids``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    path = model_dir / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    g = model.graph
    out = next(o for o in g.output if o.name == "logits")
    producer = next(n for n in g.node if "logits" in n.output)
    producer.output[list(producer.output).index("logits")] = "logits_unbiased"
    elem = out.type.tensor_type.elem_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    bias = np.zeros(vocab, dtype=dtype)
    bias[ids] = -1e4
    g.initializer.append(numpy_helper.from_array(bias, "logits_suppress_bias"))
    g.node.append(
        helper.make_node("Add", ["logits_unbiased", "logits_suppress_bias"], ["logits"], name="logits_suppress")
    )
    onnx.save(model, str(path))


def portable_genai_config(build: Path) -> dict:
    """The builder's genai_config.json, loadable by onnxruntime-genai 0.14 (Ryzen AI 1.8) too.

    Newer builders write model keys 0.14 refuses (``bor_token_id``, ``bot_token_id``, ...): drop them;
    and ``decoder.sliding_window.cache_slack`` when it is 0, the runtime's default.
    """
    gcfg = json.loads((build / "genai_config.json").read_text(encoding="utf-8"))
    known = {"bos_token_id", "context_length", "decoder", "eos_token_id", "pad_token_id", "type", "vocab_size"}
    for key in set(gcfg["model"]) - known:
        gcfg["model"].pop(key)
    window = gcfg["model"]["decoder"].get("sliding_window", {})
    if window.get("cache_slack") == 0:
        del window["cache_slack"]
    return gcfg


def make_checkpoint(
    fam: Family,
    hf: Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 256,
    max_positions: int = 4096,
) -> tuple[dict[str, int], dict]:
    """A random-weight Hugging Face checkpoint of ``fam`` in ``hf``: its added-token ids and tokenizer config."""
    import torch
    import transformers

    hf.mkdir(parents=True, exist_ok=True)
    train_tokenizer(fam, hf)
    tok = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    torch.manual_seed(SEED)
    cfg_cls = getattr(transformers, fam.arch.replace("ForCausalLM", "Config"))
    cfg = cfg_cls(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=ids[fam.bos] if fam.bos else None,
        eos_token_id=[ids[t] for t in fam.eos_ids],
        pad_token_id=ids[fam.pad],
    )
    model = getattr(transformers, fam.arch)(cfg)
    model.save_pretrained(hf)
    tcfg = tokenizer_config(fam, max_positions)
    (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2), encoding="utf-8")
    return ids, tcfg


def tokenizer_config(fam: Family, max_positions: int) -> dict:
    """The tokenizer_config.json of a fixture checkpoint (the chat template is added to the shipped one)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": fam.bos,
        "eos_token": fam.eos,
        "pad_token": fam.pad,
        "model_max_length": max_positions,
        "clean_up_tokenization_spaces": False,
        **fam.tokenizer_config,
    }


def run_builder(hf: Path, build: Path, cache: Path, extra_options: list[str] = (), precision: str = "int4") -> None:
    """onnxruntime-genai's model builder on ``hf`` (CPU), in a subprocess, quietly."""
    extra = ["--extra_options", *extra_options] if extra_options else []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "onnxruntime_genai.models.builder",
            "-i",
            str(hf),
            "-o",
            str(build),
            "-p",
            precision,
            "-e",
            "cpu",
            "-c",
            str(cache),
            *extra,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def finish_folder(fam: Family, build: Path, out: Path, ids: dict[str, int], tcfg: dict) -> None:
    """``out`` as the fixtures ship it: the builder's graph and tokenizer, a portable genai_config, the family's template."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ("model.onnx", "model.onnx.data", "tokenizer.json"):
        shutil.copy2(build / name, out / name)
    gcfg = portable_genai_config(build)
    gcfg["model"]["eos_token_id"] = [ids[t] for t in fam.eos_ids]
    gcfg["model"]["pad_token_id"] = ids[fam.pad]
    if fam.bos:
        gcfg["model"]["bos_token_id"] = ids[fam.bos]
    (out / "genai_config.json").write_text(json.dumps(gcfg, indent=4) + "\n", encoding="utf-8")
    tcfg = {**tcfg, "chat_template": (TEMPLATES / fam.template).read_text(encoding="utf-8")}
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
    shutil.copy2(TEMPLATES / fam.template, out / "chat_template.jinja")
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {k: v for k, v in {"bos_token": fam.bos, "eos_token": fam.eos, "pad_token": fam.pad}.items() if v},
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )


def build_model(fam: Family, out: Path, **shape: int) -> None:
    """``out``: a fixture model of ``fam``, ``shape`` as :func:`make_checkpoint` takes it."""
    log(
        f"building {out.relative_to(ROOT)} ({fam.name}, hidden {shape.get('hidden', 128)}, {shape.get('layers', 2)} layers)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        ids, tcfg = make_checkpoint(fam, hf, **shape)
        build = Path(tmp) / "onnx"
        run_builder(hf, build, Path(tmp) / "cache")
        add_logit_bias(build, invalid_utf8_ids(hf / "tokenizer.json"), VOCAB)
        finish_folder(fam, build, out, ids, tcfg)


#: The sliding attention window of ``tiny-gemma3-sliding``: far shorter than the prompts the
#: tests send (real Gemma 3 uses 512 or 1024), so prompts of a few hundred tokens cross it.
SLIDING_WINDOW = 128


def build_gemma3_sliding(out: Path = MODELS / "tiny-gemma3-sliding", *, max_positions: int = 8192) -> None:
    """A random Gemma 3 text model (``Gemma3ForCausalLM``) that declares a sliding window.

    One sliding-window layer and one global layer, as Gemma 3 alternates them, exported by
    onnxruntime-genai's builder with its defaults: the local layer keeps a window-sized KV
    cache, and genai_config.json carries ``decoder.sliding_window`` as the builder writes it.
    """
    import build_gemma3_vision  # noqa: PLC0415  (sibling script: the builder run for Gemma 3 configs)
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    fam = GEMMA3
    log(f"building {out.relative_to(ROOT)} (gemma3 text, sliding window {SLIDING_WINDOW})")
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        hf.mkdir()
        train_tokenizer(fam, hf)
        tok = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        eos = [ids[t] for t in fam.eos_ids]
        cfg = Gemma3TextConfig(
            vocab_size=VOCAB,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            query_pre_attn_scalar=32,
            max_position_embeddings=max_positions,
            sliding_window=SLIDING_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
            bos_token_id=ids[fam.bos],
            eos_token_id=eos,
            pad_token_id=ids[fam.pad],
        )
        torch.manual_seed(SEED)
        Gemma3ForCausalLM(cfg).save_pretrained(hf)
        tcfg = tokenizer_config(fam, max_positions)
        (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2), encoding="utf-8")
        build = Path(tmp) / "onnx"
        build_gemma3_vision.run_builder(hf, build, Path(tmp) / "cache", [])
        windows = build_gemma3_vision.window_sizes(build / "model.onnx")
        if windows != [SLIDING_WINDOW, -1]:
            raise RuntimeError(f"expected attention windows [{SLIDING_WINDOW}, -1], the decoder has {windows}")
        add_logit_bias(build, invalid_utf8_ids(hf / "tokenizer.json"), VOCAB)
        gcfg = portable_genai_config(build)
        declared = gcfg["model"]["decoder"].get("sliding_window", {})
        if declared.get("window_size") != SLIDING_WINDOW or declared.get("layers") != [0]:
            raise RuntimeError(f"expected decoder.sliding_window of {SLIDING_WINDOW} on layer 0, got {declared}")
        gcfg["model"]["eos_token_id"] = eos
        gcfg["model"]["pad_token_id"] = ids[fam.pad]
        gcfg["model"]["bos_token_id"] = ids[fam.bos]
        gcfg["search"]["do_sample"] = False
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for name in ("model.onnx", "model.onnx.data", "tokenizer.json"):
            shutil.copy2(build / name, out / name)
        (out / "genai_config.json").write_text(json.dumps(gcfg, indent=4) + "\n", encoding="utf-8")
        tcfg["chat_template"] = (TEMPLATES / fam.template).read_text(encoding="utf-8")
        (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
        shutil.copy2(TEMPLATES / fam.template, out / "chat_template.jinja")
        special = {"bos_token": fam.bos, "eos_token": fam.eos, "pad_token": fam.pad}
        (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", action="store_true", help="also build the ~30M-parameter benchmark model")
    parser.add_argument("--bench-only", action="store_true", help="only build the benchmark model")
    parser.add_argument("--tokenizers-only", action="store_true", help="only build tests/fixtures/tokenizers")
    args = parser.parse_args()

    train_sentencepiece_tokenizer(TOKENIZERS / "sentencepiece-llama2")
    if args.tokenizers_only:
        return
    if not args.bench_only:
        build_model(LLAMA, MODELS / "tiny-llama")
        # The embedded default model ships inside the wheel (ryzenai_core/models/).
        embedded = EMBEDDED / "tiny-random-llama"
        if embedded.exists():
            shutil.rmtree(embedded)
        shutil.copytree(MODELS / "tiny-llama", embedded)
        (embedded / "README.md").write_text(EMBEDDED_CARD, encoding="utf-8")
        build_model(QWEN3, MODELS / "tiny-qwen3")
        import build_lora_fixture  # noqa: PLC0415  (sibling script: tiny-qwen3's checkpoint with LoRA inputs)

        build_lora_fixture.main()
        build_model(GEMMA3, MODELS / "tiny-gemma3-text", max_positions=16384)
        build_gemma3_sliding()
        import build_gemma3_vision  # noqa: PLC0415  (sibling script)
        import build_replicas  # noqa: PLC0415  (sibling script)

        build_gemma3_vision.build()

        build_replicas.main()
    if args.bench or args.bench_only:
        build_model(
            LLAMA, ROOT / "benchmarks" / "models" / "bench-30m", hidden=512, layers=10, heads=8, kv_heads=4, ffn=1536
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
