"""The tiny Gemma 3 multimodal fixture runs on onnxruntime-genai: text, one image, two images."""

from __future__ import annotations

import io
import json

import numpy as np
import onnxruntime_genai as og
import pytest
from PIL import Image

from conftest import MODELS, REPLICAS

TINY_VISION = MODELS / "tiny-gemma3-vision"
IMAGE_TOKENS = 256  # Gemma 3: every image costs 256 <image_soft_token> tokens
PROMPT_TEXT = "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
PROMPT_IMAGE = "<bos><start_of_turn>user\n<start_of_image>What is in the picture?<end_of_turn>\n<start_of_turn>model\n"


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def model() -> og.Model:
    return og.Model(str(TINY_VISION))


@pytest.fixture(scope="module")
def processor(model: og.Model):
    return model.create_multimodal_processor()


@pytest.fixture(scope="module")
def soft_token_id() -> int:
    tok = json.loads((TINY_VISION / "tokenizer.json").read_text(encoding="utf-8"))
    return next(t["id"] for t in tok["added_tokens"] if t["content"] == "<image_soft_token>")


def greedy(model: og.Model, generator_input, n: int = 8, max_length: int = 1024) -> tuple[list[int], np.ndarray]:
    """The first ``n`` greedy tokens and the logits of the first one."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length, do_sample=False)
    gen = og.Generator(model, params)
    if isinstance(generator_input, list):
        gen.append_tokens(generator_input)
    else:
        gen.set_inputs(generator_input)
    first = np.array(gen.get_output("logits"))[0, -1].copy()
    out: list[int] = []
    while not gen.is_done() and len(out) < n:
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out, first


def test_config_is_gemma3_multimodal():
    cfg = json.loads((TINY_VISION / "genai_config.json").read_text(encoding="utf-8"))
    model = cfg["model"]
    assert model["type"] == "gemma3"
    assert "inputs_embeds" in model["decoder"]["inputs"] and "input_ids" not in model["decoder"]["inputs"]
    assert model["vision"]["filename"] == "gemma-3-vision.onnx"
    assert model["embedding"]["filename"] == "gemma-3-embedding.onnx"
    assert cfg["search"]["max_length"] == model["context_length"] == 16384
    proc = json.loads((TINY_VISION / "processor_config.json").read_text(encoding="utf-8"))
    assert proc["processor"]["name"] == "gemma_3_image_processing"
    tcfg = json.loads((TINY_VISION / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "<start_of_image>" in tcfg["chat_template"]
    total = sum(p.stat().st_size for p in TINY_VISION.iterdir())
    assert total < 8_000_000


def test_decoder_has_one_sliding_window_layer():
    import onnx

    m = onnx.load(str(TINY_VISION / "model.onnx"), load_external_data=False)
    windows = [
        next(a.i for a in n.attribute if a.name == "local_window_size")
        for n in m.graph.node
        if n.op_type == "GroupQueryAttention"
    ]
    assert windows == [512, -1]


def test_text_only_append_tokens(model):
    tok = og.Tokenizer(model)
    out, _ = greedy(model, list(tok.encode(PROMPT_TEXT)))
    assert len(out) == 8
    assert isinstance(tok.decode(out), str)


def test_text_only_through_processor_matches_append_tokens(model, processor):
    tok = og.Tokenizer(model)
    via_tokens, _ = greedy(model, list(tok.encode(PROMPT_TEXT)))
    via_processor, _ = greedy(model, processor(PROMPT_TEXT))
    assert via_processor == via_tokens


def test_short_max_length_works_despite_the_window(model):
    """Every layer keeps a full-length KV cache, so max_length may be below the 512-token window."""
    tok = og.Tokenizer(model)
    ids = list(tok.encode(PROMPT_TEXT))
    out, _ = greedy(model, ids, n=4, max_length=len(ids) + 4)
    assert len(out) == 4


def test_processor_expands_each_image_to_256_tokens(processor, soft_token_id):
    one = processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((255, 0, 0))))
    ids = one["input_ids"].as_numpy()
    assert int((ids == soft_token_id).sum()) == IMAGE_TOKENS
    assert one["pixel_values"].as_numpy().shape == (1, 3, 896, 896)
    assert one["num_image_tokens"].as_numpy().tolist() == [IMAGE_TOKENS]

    two_prompt = PROMPT_IMAGE.replace("<start_of_image>", "<start_of_image><start_of_image>")
    two = processor(two_prompt, images=og.Images.open_bytes(png((255, 0, 0)), png((0, 0, 255))))
    assert int((two["input_ids"].as_numpy() == soft_token_id).sum()) == 2 * IMAGE_TOKENS
    assert two["pixel_values"].as_numpy().shape == (2, 3, 896, 896)


def test_image_generation_and_images_change_the_output(model, processor):
    red_out, red_logits = greedy(model, processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((255, 0, 0)))))
    blue_out, blue_logits = greedy(model, processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((0, 0, 255)))))
    again, again_logits = greedy(model, processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((255, 0, 0)))))
    assert len(red_out) == len(blue_out) == 8
    assert red_out != blue_out
    assert np.abs(red_logits - blue_logits).max() > 0.05
    assert again == red_out and np.allclose(again_logits, red_logits)


def test_two_images_in_one_prompt(model, processor):
    prompt = PROMPT_IMAGE.replace("<start_of_image>", "<start_of_image> and <start_of_image>")
    pair = og.Images.open_bytes(png((255, 0, 0)), png((0, 0, 255)))
    swapped = og.Images.open_bytes(png((0, 0, 255)), png((255, 0, 0)))
    _, a = greedy(model, processor(prompt, images=pair), n=1)
    _, b = greedy(model, processor(prompt, images=swapped), n=1)
    assert np.abs(a - b).max() > 0.01  # each image lands on its own tokens


def test_image_count_must_match_the_prompt(processor):
    with pytest.raises(Exception, match="image"):
        processor(PROMPT_TEXT, images=og.Images.open_bytes(png((255, 0, 0))))


def test_gemma_replica_runs_images_on_the_cpu_with_raw_oga():
    """The replica keeps AMD's layout; with the decoder's Ryzen AI options cleared it runs on the CPU."""
    cfg = og.Config(str(REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"))
    cfg.clear_providers()
    replica = og.Model(cfg)
    processor = replica.create_multimodal_processor()
    red, _ = greedy(replica, processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((255, 0, 0)))), n=4)
    blue, _ = greedy(replica, processor(PROMPT_IMAGE, images=og.Images.open_bytes(png((0, 0, 255)))), n=4)
    assert len(red) == 4 and red != blue
    tok = og.Tokenizer(replica)
    text, _ = greedy(replica, list(tok.encode(PROMPT_TEXT)), n=4)
    assert len(text) == 4
