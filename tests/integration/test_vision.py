"""Images through the engine on the tiny Gemma 3 multimodal fixture and the Gemma replica (real OGA)."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from conftest import MODELS, REPLICAS, TINY_LLAMA
from ryzenai_core import ChatMessage, ContextWindowExceededError, Engine, InvalidRequestError
from ryzenai_core.options import validated_options

VISION = MODELS / "tiny-gemma3-vision"
REPLICA = REPLICAS / "Gemma-3-4b_rai_1.8.0_npu_16K"
GREEDY = validated_options(max_new_tokens=8, temperature=0, kv_reuse=False)


def png(color: str, size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def ask(*images: object, text: str = "What is in the picture?") -> list[ChatMessage]:
    return [ChatMessage("user", [*({"type": "image", "image": i} for i in images), {"type": "text", "text": text}])]


@pytest.fixture(scope="module", params=["process", "inline"])
def engine(request) -> Engine:
    return Engine.get(VISION, execution=request.param)


def test_the_same_image_in_every_form_gives_the_same_answer(engine: Engine, tmp_path: Path) -> None:
    data = png("red")
    path = tmp_path / "red.png"
    path.write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    answers = {engine.generate(ask(form), GREEDY).text for form in (data, str(path), path.as_uri(), url)}
    answers.add(engine.generate(ask(png("red", fmt="BMP")), GREEDY).text)  # a format the runtime cannot read
    assert len(answers) == 1


def test_different_images_give_different_answers(engine: Engine) -> None:
    assert engine.generate(ask(png("red")), GREEDY).text != engine.generate(ask(png("blue")), GREEDY).text


def test_image_tokens_are_counted_as_the_runtime_sees_them(engine: Engine) -> None:
    text_only = engine.count_tokens(ask())
    one, two = ask(png("red")), ask(png("red"), png("blue"))
    assert engine.count_tokens(one) - text_only == engine.package.image_tokens + 6  # 256 soft tokens, markers, breaks
    assert engine.count_tokens(two) - engine.count_tokens(one) == engine.count_tokens(one) - text_only
    for messages in (one, two):
        out = engine.generate(messages, GREEDY)
        assert out.usage.prompt_tokens == engine.count_tokens(messages)
        assert out.plan.prompt_tokens == out.usage.prompt_tokens


def test_two_images_in_their_order(engine: Engine) -> None:
    red_blue = engine.generate(ask(png("red"), png("blue")), GREEDY).text
    assert red_blue != engine.generate(ask(png("blue"), png("red")), GREEDY).text


def test_text_only_prompts_on_a_vision_package(engine: Engine) -> None:
    out = engine.generate([ChatMessage("user", "hi")], GREEDY)
    assert out.usage.completion_tokens == 8 and out.text


@pytest.mark.parametrize(
    ("image", "fragment"),
    [
        (b"GIF89a not really", "not an image format Pillow can read"),
        (b"\x00\x01garbage", "not an image format Pillow can read"),
        (png("red")[:50], "could not be decoded"),
        (b"", "is empty"),
        ("https://example.com/a.png", "does not fetch from the network"),
    ],
)
def test_bad_images_are_typed_errors_and_the_worker_still_answers(image: object, fragment: str) -> None:
    engine = Engine.get(VISION, execution="process")
    with pytest.raises(InvalidRequestError, match=fragment):
        engine.generate(ask(image), GREEDY)
    pid = engine.worker_pid()
    assert engine.generate(ask(png("red")), GREEDY).usage.completion_tokens == 8
    assert engine.worker_pid() == pid  # the same worker: nothing killed it


def test_every_format_the_runtime_would_die_on_is_converted() -> None:
    engine = Engine.get(VISION, execution="process")
    for fmt in ("GIF", "WEBP", "BMP", "TIFF"):
        assert engine.generate(ask(png("green", fmt=fmt)), GREEDY).usage.completion_tokens == 8


def test_a_package_without_vision_refuses_images() -> None:
    engine = Engine.get(TINY_LLAMA, execution="inline")
    with pytest.raises(
        InvalidRequestError, match=r"message #0 \(user\) has an image, and tiny-llama has no vision model"
    ):
        engine.generate(ask(png("red")), GREEDY)


def test_an_image_prompt_over_the_limit_is_refused_before_generating(tmp_path: Path) -> None:
    small = tmp_path / "small-window"
    shutil.copytree(VISION, small)
    cfg = json.loads((small / "genai_config.json").read_text())
    cfg["search"]["max_length"] = 600
    (small / "genai_config.json").write_text(json.dumps(cfg))
    engine = Engine.get(small, execution="inline")
    with pytest.raises(ContextWindowExceededError) as info:
        engine.generate(ask(png("red"), png("blue"), png("green")), GREEDY)
    assert info.value.prompt_tokens == engine.count_tokens(ask(png("red"), png("blue"), png("green"))) > 600


# Enough text after the image that a kept prefix (a multiple of 64 tokens) could hold all of it:
# only the images in the cache key keep the red image's KV from serving the blue one.
LONG_QUESTION = "What is in the picture? " + "Describe it in a few words. " * 10


def test_kv_reuse_never_reuses_another_images_kv(engine: Engine) -> None:
    reuse = validated_options(max_new_tokens=8, temperature=0, kv_reuse=True)
    for text in ("What is in the picture?", LONG_QUESTION):
        first = ask(png("red"), text=text)
        engine.generate(first, reuse)  # the cache now holds the red image's KV
        changed = ask(png("blue"), text=text)  # same token ids, another image
        assert engine.count_tokens(changed) == engine.count_tokens(first)
        warm = engine.generate(changed, reuse)
        again = engine.generate(changed, reuse)  # the same image again: its own KV is reused
        assert warm.timings.reused_prompt_tokens == 0 and again.text == warm.text
        assert warm.text == engine.generate(changed, GREEDY).text
    assert again.timings.reused_prompt_tokens > engine.package.image_tokens


def test_multi_turn_with_an_image_in_an_earlier_turn_reuses_it_and_equals_a_cold_run(engine: Engine) -> None:
    reuse = validated_options(max_new_tokens=8, temperature=0, kv_reuse=True)
    turn1 = ask(png("red"), text=LONG_QUESTION)
    answer = engine.generate(turn1, reuse).text
    turn2 = [*turn1, ChatMessage("assistant", answer), ChatMessage("user", "And what colour is it?")]
    warm = engine.generate(turn2, reuse)
    assert warm.timings.reused_prompt_tokens > engine.package.image_tokens  # the image's KV was kept
    assert warm.text == engine.generate(turn2, GREEDY).text


@pytest.mark.parametrize("execution", ["process", "inline"])
def test_the_gemma_replica_runs_text_and_images_on_the_cpu(execution: str) -> None:
    engine = Engine.get(REPLICA, provider="cpu", execution=execution)
    assert engine.package.is_ryzenai and engine.package.has_vision
    text = engine.generate([ChatMessage("user", "hi")], GREEDY)
    red, blue = engine.generate(ask(png("red")), GREEDY), engine.generate(ask(png("blue")), GREEDY)
    assert text.usage.completion_tokens == 8 and red.text != blue.text
    assert red.plan.prefill_bucket is not None  # a token-fusion package: the padded bucket is reported


# ---------------------------------------------------------------- image markers are never generated
@pytest.mark.parametrize("execution", ["process", "inline"])
@pytest.mark.parametrize("images", [0, 1], ids=["text", "image"])
def test_a_model_that_prefers_its_image_markers_never_generates_them(marker_eager_vision, execution, images) -> None:
    folder, markers = marker_eager_vision
    engine = Engine.get(folder, execution=execution)
    messages = ask(*[png("red")] * images)
    greedy = engine.generate(messages, validated_options(max_new_tokens=12, temperature=0, kv_reuse=True))
    sampled = engine.generate(messages, validated_options(max_new_tokens=12, temperature=2.0, seed=3))
    for answer in (greedy, sampled):
        assert answer.finish_reason == "length" and len(answer.token_ids) == 12
        assert not set(answer.token_ids) & set(markers.values()) and answer.text
    # the next turn continues the kept generator (its last step ran on a generated token)
    turn2 = [*messages, ChatMessage("assistant", greedy.text), ChatMessage("user", "And then?")]
    assert engine.generate(turn2, validated_options(max_new_tokens=4, temperature=0, kv_reuse=True)).text


def test_a_runtime_that_keeps_its_logits_ends_the_answer_at_an_image_marker(marker_eager_vision, monkeypatch, caplog):
    """Where the runtime refuses get_logits/set_logits, a generated image marker ends the answer
    (finish_reason "stop") before the model is fed it: warned once, never a runtime failure."""
    import onnxruntime_genai as og

    real = og.Generator

    class Refusing:
        def __init__(self, *args: object) -> None:
            self._generator = real(*args)

        def get_logits(self) -> None:
            raise RuntimeError("GetLogits is not supported on this device")

        def __getattr__(self, name: str) -> object:
            return getattr(self._generator, name)

    folder, _ = marker_eager_vision
    expected = Engine.get(VISION, execution="inline").generate(ask(png("red")), GREEDY)
    eager = Engine.get(folder, execution="inline", num_threads=1)  # these engines' own sessions
    plain = Engine.get(VISION, execution="inline", num_threads=1)
    monkeypatch.setattr(og, "Generator", Refusing)
    try:
        with caplog.at_level("WARNING"):
            answers = [eager.generate(ask(*[png("red")] * images), GREEDY) for images in (0, 1, 1)]
            answer = plain.generate(ask(png("red")), GREEDY)  # a model that does not pick them: unchanged
    finally:
        eager.close()
        plain.close()
    assert [(a.finish_reason, a.token_ids, a.text) for a in answers] == [("stop", [], "")] * 3
    assert (answer.text, answer.finish_reason) == (expected.text, "length")
    refusals = [r for r in caplog.records if "refused to mask the image markers" in r.getMessage()]
    assert len(refusals) == 2 and "GetLogits is not supported" in refusals[0].getMessage()  # once per model
