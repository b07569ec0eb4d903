"""Build ``tests/fixtures/models/tiny-gemma3-vision``: a tiny random-weight Gemma 3 multimodal model.

The layout onnxruntime-genai runs as ``model.type = "gemma3"`` with images:

* ``model.onnx`` (+ ``.data``): the text decoder, built by onnxruntime-genai's model builder
  with ``exclude_embeds=true`` (it takes ``inputs_embeds``), int4, one sliding-window layer
  and one global layer, as in Gemma 3. The window lives in the graph (GroupQueryAttention's
  ``local_window_size``); every layer keeps a full-length KV cache (``windowed_kv_cache=false``),
  so any ``max_length`` works (a window-sized cache refuses a ``max_length`` below the window);
* ``gemma-3-vision.onnx``: SigLIP vision tower + multimodal projector,
  ``pixel_values [N,3,896,896]`` -> ``image_features [N,256,hidden]``;
* ``gemma-3-embedding.onnx``: (``input_ids``, ``image_features``) -> ``inputs_embeds``: the
  scaled token embeddings, with the ``<image_soft_token>`` positions taken from the image
  features in order, as transformers' ``masked_scatter`` does (works with zero images too; a
  soft token without a feature row, such as a generated one, fails as with the real model);
* ``processor_config.json`` in onnxruntime-extensions' format (896x896, mean/std 0.5);
* the Gemma 3 tokenizer of ``tiny-gemma3-text`` (``<start_of_image>``, ``<image_soft_token>``,
  ``<end_of_image>`` included) and the real Gemma 3 chat template.

Random weights, fixed seed; Hugging Face initialises the projector to zeros, so it is drawn
again here, or every image would give the same output. The ``image_features`` input of the
embedding model has no declared rank on purpose: onnxruntime-genai hands it rank 3 with
images and an empty tensor without, and a fixed rank fails one case or the other.

Needs the ``fixtures`` extra; tests and CI use the committed output.

    python scripts/build_gemma3_vision.py              # the model (about 15 s)
    python scripts/build_gemma3_vision.py --replicas   # then rewrite the replica folders too
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import build_fixtures as bf  # noqa: E402  (sibling script)

OUT = bf.MODELS / "tiny-gemma3-vision"
SLIDING_WINDOW = 512  # tokens; the real model's is 1024. Both hold an image (256 tokens) and its text.
MAX_LENGTH = 16384
IMAGE_SIZE = 896
PATCH_SIZE = 28  # 32x32 patches, average-pooled 2x2 into 16x16 = 256 image tokens
IMAGE_TOKENS = 256
VISION_HIDDEN = 64
TEXT_HIDDEN = 128
ROPE_GLOBAL = 1_000_000.0
ROPE_LOCAL = 10_000.0

PROCESSOR_CONFIG = {
    "processor": {
        "name": "gemma_3_image_processing",
        "transforms": [
            {"operation": {"name": "decode_image", "type": "DecodeImage", "attrs": {"color_space": "RGB"}}},
            {
                "operation": {
                    "name": "resize",
                    "type": "Resize",
                    "attrs": {
                        "interpolation": "CUBIC",
                        "width": IMAGE_SIZE,
                        "height": IMAGE_SIZE,
                        "keep_aspect_ratio": 0,
                    },
                }
            },
            {"operation": {"name": "re-scale", "type": "Rescale"}},
            {
                "operation": {
                    "name": "normalize",
                    "type": "Normalize",
                    "attrs": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
                }
            },
            {"operation": {"name": "to_channel_first", "type": "Permute3D", "attrs": {"dims": [2, 0, 1]}}},
        ],
    }
}

# genai_config keys onnxruntime-genai 0.14 (Ryzen AI 1.8) accepts; it refuses unknown ones.
MODEL_KEYS = {
    "bos_token_id",
    "context_length",
    "decoder",
    "embedding",
    "eos_token_id",
    "image_token_id",
    "pad_token_id",
    "type",
    "vision",
    "vocab_size",
}


def hf_model(hf: Path, ids: dict[str, int]):  # noqa: ANN201 - a transformers model
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(
        vocab_size=bf.VOCAB,
        hidden_size=TEXT_HIDDEN,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        query_pre_attn_scalar=32,
        max_position_embeddings=MAX_LENGTH,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": ROPE_GLOBAL},
            "sliding_attention": {"rope_type": "default", "rope_theta": ROPE_LOCAL},
        },
        bos_token_id=ids["<bos>"],
        eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]],
        pad_token_id=ids["<pad>"],
    )
    vision = SiglipVisionConfig(
        hidden_size=VISION_HIDDEN,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        vision_use_head=False,
    )
    cfg = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=IMAGE_TOKENS,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
        bos_token_id=ids["<bos>"],
        eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]],
        pad_token_id=ids["<pad>"],
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(bf.SEED)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        proj = model.model.multi_modal_projector.mm_input_projection_weight
        gen = torch.Generator().manual_seed(bf.SEED + 1)
        proj.copy_(torch.randn(proj.shape, generator=gen) * 0.1)
    model.save_pretrained(hf)
    return model


def export_vision(model, path: Path) -> None:  # noqa: ANN001
    import torch

    class Vision(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tower = model.model.vision_tower
            self.projector = model.model.multi_modal_projector

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            hidden = self.tower(pixel_values=pixel_values).last_hidden_state
            return self.projector(hidden)

    pixels = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            Vision().eval(),
            (pixels,),
            str(path),
            input_names=["pixel_values"],
            output_names=["image_features"],
            dynamic_axes={"pixel_values": {0: "num_images"}, "image_features": {0: "num_images"}},
            opset_version=17,
            dynamo=False,
        )


def export_embedding(model, path: Path, image_token_id: int) -> None:  # noqa: ANN001
    import onnx
    import torch

    class Embedding(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = model.model.language_model.embed_tokens  # scales by sqrt(hidden)

        def forward(self, input_ids: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
            # As Gemma 3 in transformers does it: the features fill the image token positions in
            # order (masked_scatter, exported as ScatterND). So an <image_soft_token> the model is
            # fed without a feature row for it (one it generated) fails in the runtime, as it
            # does with the real model.
            embeds = self.embed(input_ids)
            mask = (input_ids == image_token_id).unsqueeze(-1).expand_as(embeds)
            return embeds.masked_scatter(mask, image_features.to(embeds.dtype))

    ids = torch.tensor([[1, image_token_id, image_token_id, 2]], dtype=torch.int64)
    feats = torch.zeros(1, 2, TEXT_HIDDEN)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            Embedding().eval(),
            (ids, feats),
            str(path),
            input_names=["input_ids", "image_features"],
            output_names=["inputs_embeds"],
            dynamic_axes={
                "input_ids": {0: "batch_size", 1: "sequence_length"},
                "image_features": {0: "num_images", 1: "image_tokens"},
                "inputs_embeds": {0: "batch_size", 1: "sequence_length"},
            },
            opset_version=17,
            dynamo=False,
        )
    # Leave the rank of image_features open (see the module docstring).
    m = onnx.load(str(path))
    feat = next(i for i in m.graph.input if i.name == "image_features")
    feat.type.tensor_type.ClearField("shape")
    onnx.save(m, str(path))


def build_decoder(hf: Path, build: Path, cache: Path) -> None:
    """onnxruntime-genai's builder on the checkpoint, text decoder only (``exclude_embeds``)."""
    run_builder(hf, build, cache, ["exclude_embeds=true", "windowed_kv_cache=false"])
    windows = window_sizes(build / "model.onnx")
    if windows != [SLIDING_WINDOW, -1]:
        raise RuntimeError(f"expected attention windows [{SLIDING_WINDOW}, -1], the decoder has {windows}")


def run_builder(hf: Path, build: Path, cache: Path, extra_options: list[str]) -> None:
    """onnxruntime-genai's model builder (int4, CPU) on a Gemma 3 checkpoint, in this process.

    transformers 5 nests Gemma 3's rope settings per layer type; the builder reads the flat
    form (``rope_parameters.rope_type``, ``rope_local_base_freq``), so the config it loads is
    flattened first.
    """
    from onnxruntime_genai.models import builder

    original = builder.get_hf_details

    def flat_details(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        details = original(*args, **kwargs)
        config = details["hf_config"]
        for c in (config, getattr(config, "text_config", None)):
            rope = getattr(c, "rope_parameters", None)
            if isinstance(rope, dict) and "full_attention" in rope:
                c.rope_local_base_freq = rope["sliding_attention"]["rope_theta"]
                c.rope_parameters = dict(rope["full_attention"])
                c.rope_theta = rope["full_attention"]["rope_theta"]
        return details

    builder.get_hf_details = flat_details
    log = io.StringIO()
    logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            options = builder.parse_extra_options(None, str(hf), str(build), "int4", "cpu", str(cache), extra_options)
            builder.create_model(None, str(hf), str(build), "int4", "cpu", str(cache), **options)
    except Exception:
        print(log.getvalue(), file=sys.stderr)
        raise
    finally:
        builder.get_hf_details = original
        logging.disable(logging.NOTSET)


def window_sizes(path: Path) -> list[int]:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    return [
        next(a.i for a in n.attribute if a.name == "local_window_size")
        for n in m.graph.node
        if n.op_type == "GroupQueryAttention"
    ]


def genai_config(build: Path, ids: dict[str, int]) -> dict:
    gcfg = json.loads((build / "genai_config.json").read_text(encoding="utf-8"))
    model = gcfg["model"]
    dec = model["decoder"]
    if "inputs_embeds" not in dec["inputs"]:
        raise RuntimeError(f"the builder made a decoder without inputs_embeds: {dec['inputs']}")
    if "sliding_window" in dec:
        raise RuntimeError(f"expected full-length KV caches, the builder wrote {dec['sliding_window']}")
    model["type"] = "gemma3"
    model["bos_token_id"] = ids["<bos>"]
    model["eos_token_id"] = [ids["<eos>"], ids["<end_of_turn>"]]
    model["pad_token_id"] = ids["<pad>"]
    model["context_length"] = MAX_LENGTH
    model["image_token_id"] = ids["<image_soft_token>"]
    model["embedding"] = {
        "filename": "gemma-3-embedding.onnx",
        "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"},
    }
    model["vision"] = {
        "filename": "gemma-3-vision.onnx",
        "config_filename": "processor_config.json",
        "inputs": {"pixel_values": "pixel_values"},
        "outputs": {"image_features": "image_features"},
    }
    for key in set(model) - MODEL_KEYS:
        model.pop(key)
    gcfg["search"]["max_length"] = MAX_LENGTH
    gcfg["search"]["do_sample"] = False
    return gcfg


def build(out: Path = OUT) -> None:
    started = time.perf_counter()
    bf.log(f"building {out.relative_to(bf.ROOT)} (gemma3 multimodal, sliding window {SLIDING_WINDOW})")
    fam = bf.GEMMA3
    with tempfile.TemporaryDirectory() as tmp:
        hf = Path(tmp) / "hf"
        hf.mkdir()
        bf.train_tokenizer(fam, hf)
        tok = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        special = {
            "bos_token": fam.bos,
            "eos_token": fam.eos,
            "pad_token": fam.pad,
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        }
        tcfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "model_max_length": MAX_LENGTH,
            "clean_up_tokenization_spaces": False,
            **fam.tokenizer_config,
        }
        (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2), encoding="utf-8")
        model = hf_model(hf, ids)

        build_dir = Path(tmp) / "onnx"
        build_decoder(hf, build_dir, Path(tmp) / "cache")
        bf.add_logit_bias(build_dir, bf.invalid_utf8_ids(hf / "tokenizer.json"), bf.VOCAB)
        export_vision(model, build_dir / "gemma-3-vision.onnx")
        export_embedding(model, build_dir / "gemma-3-embedding.onnx", ids["<image_soft_token>"])

        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for name in ("model.onnx", "model.onnx.data", "gemma-3-vision.onnx", "gemma-3-embedding.onnx"):
            shutil.copy2(build_dir / name, out / name)
        shutil.copy2(build_dir / "tokenizer.json", out / "tokenizer.json")
        write_json(out / "genai_config.json", genai_config(build_dir, ids))
        write_json(out / "processor_config.json", PROCESSOR_CONFIG)
        template = (bf.TEMPLATES / fam.template).read_text(encoding="utf-8")
        write_json(out / "tokenizer_config.json", {**tcfg, "chat_template": template})
        shutil.copy2(bf.TEMPLATES / fam.template, out / "chat_template.jinja")
        write_json(out / "special_tokens_map.json", special)
        compare(model, out)
    size = sum(p.stat().st_size for p in out.iterdir())
    bf.log(f"{out.relative_to(bf.ROOT)}: {size / 1e6:.1f} MB in {time.perf_counter() - started:.0f} s")


def compare(model, out: Path) -> None:  # noqa: ANN001
    """Log how far the int4 ONNX model is from the checkpoint: text logits and image features."""
    import numpy as np
    import onnxruntime as ort
    import onnxruntime_genai as og
    import torch
    from tokenizers import Tokenizer

    prompt = "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
    ids = Tokenizer.from_file(str(out / "tokenizer.json")).encode(prompt, add_special_tokens=False).ids
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids])).logits[0, -1].numpy()
    oga = og.Model(str(out))
    params = og.GeneratorParams(oga)
    params.set_search_options(max_length=64)
    gen = og.Generator(oga, params)
    gen.append_tokens(ids)
    got = np.asarray(gen.get_output("logits"))[0, -1]
    valid = got > -1000  # tokens the logit bias leaves open
    text_diff = float(np.abs(got[valid] - ref[valid]).max())
    pixels = torch.from_numpy(np.random.default_rng(bf.SEED).uniform(-1, 1, (1, 3, IMAGE_SIZE, IMAGE_SIZE)))
    pixels = pixels.to(torch.float32)
    with torch.no_grad():
        ref_feat = model.model.get_image_features(pixels).pooler_output.numpy()
    sess = ort.InferenceSession(str(out / "gemma-3-vision.onnx"), providers=["CPUExecutionProvider"])
    feat = sess.run(None, {"pixel_values": pixels.numpy()})[0]
    vision_diff = float(np.abs(feat - ref_feat).max())
    bf.log(f"int4 decoder vs checkpoint: max |logit diff| {text_diff:.3f}; vision: max |diff| {vision_diff:.2e}")
    if vision_diff > 1e-3 or text_diff > 0.5:
        raise RuntimeError("the ONNX models do not match the checkpoint")


def write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", action="store_true", help="rewrite the replica folders afterwards")
    args = parser.parse_args()
    build()
    if args.replicas:
        import build_replicas  # noqa: PLC0415  (sibling script)

        build_replicas.main()


if __name__ == "__main__":
    main()
