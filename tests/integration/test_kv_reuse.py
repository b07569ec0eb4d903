"""KV prefix reuse is exact: a warm call (reuse on) answers as a cold one, on every fixture family.

Real onnxruntime-genai on the fixtures; ``tiny-gemma3-sliding`` declares a 128-token sliding
window (``decoder.sliding_window``, as the model builder writes it for Gemma 3), far shorter
than most prompts sent here. The property over prompt pairs is a seeded generator of the
pairs that real callers send one after the other.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import pytest
from PIL import Image

from conftest import MODELS, ROOT, TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import ChatMessage, Engine, ModelPackage
from ryzenai_core.generation.kv_cache import feed, reusable_prefix
from ryzenai_core.generation.session import Session
from ryzenai_core.messages import RawPrompt
from ryzenai_core.options import validated_options
from ryzenai_core.package.reuse import ALIGN

SLIDING = MODELS / "tiny-gemma3-sliding"
VISION = MODELS / "tiny-gemma3-vision"
WINDOW = 128
WORDS = (ROOT / "scripts" / "fixture_corpus.txt").read_text(encoding="utf-8").split()
FAMILIES = [TINY_LLAMA, TINY_QWEN3, TINY_GEMMA3, VISION, SLIDING]


def opts(reuse: bool, n: int = 10):
    return validated_options(max_new_tokens=n, temperature=0, kv_reuse=reuse)


def words(rng: random.Random, n: int) -> str:
    start = rng.randrange(len(WORDS))
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


def png(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda p: p.name)
def engine(request) -> Engine:
    return Engine.get(request.param, execution="inline")


def warm_and_cold(engine: Engine, first, second, n: int = 10):
    """The answer to ``first``, then to ``second`` with reuse on, and to ``second`` with reuse off."""
    before = engine.generate(first, opts(True, n))
    warm = engine.generate(second, opts(True, n))
    cold = engine.generate(second, opts(False, n))
    return before, warm, cold


def assert_no_refusal(engine: Engine) -> None:
    """The runtime never refused a rewind the engine asked for: such a refusal is answered cold
    (and turns reuse off), which would hide a wrong reuse decision."""
    assert engine.inline_session().kv_cache.refused is None


# ---------------------------------------------------------------------- the fixture
def test_the_sliding_fixture_declares_its_window_as_the_builder_writes_it():
    import onnx

    cfg = json.loads((SLIDING / "genai_config.json").read_text(encoding="utf-8"))
    declared = cfg["model"]["decoder"]["sliding_window"]
    assert cfg["model"]["type"] == "gemma3_text"
    assert declared["window_size"] == WINDOW and declared["layers"] == [0]
    assert ModelPackage.open(SLIDING).sliding_window == WINDOW
    graph = onnx.load(str(SLIDING / "model.onnx"), load_external_data=False)
    windows = [
        next(a.i for a in node.attribute if a.name == "local_window_size")
        for node in graph.graph.node
        if node.op_type == "GroupQueryAttention"
    ]
    assert windows == [WINDOW, -1]
    assert sum(p.stat().st_size for p in SLIDING.iterdir()) < 4_000_000


# ---------------------------------------------------------------------- a sliding window
def chat(system_words: int, seed: int = 0) -> list[ChatMessage]:
    rng = random.Random(seed)
    return [ChatMessage("system", words(rng, system_words)), ChatMessage("user", "What does the fox do?")]


@pytest.mark.slow
@pytest.mark.parametrize("system_words", [60, 2400])
def test_a_chat_longer_than_the_sliding_window_answers_warm_as_cold(system_words):
    """Two turns of about 200 and 4,000 prompt tokens on a 128-token window: the second turn is cold."""
    engine = Engine.get(SLIDING, execution="inline")
    turn1 = chat(system_words)
    first = engine.generate(turn1, opts(True))
    turn2 = [*turn1, ChatMessage("assistant", first.text), ChatMessage("user", "And then?")]
    warm = engine.generate(turn2, opts(True))
    cold = engine.generate(turn2, opts(False))
    assert warm.usage.prompt_tokens > WINDOW
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    assert warm.timings.reused_prompt_tokens == 0  # the first turn's generator held more than the window
    assert_no_refusal(engine)


def test_a_chat_within_the_sliding_window_is_reused():
    engine = Engine.get(SLIDING, execution="inline")
    turn1 = chat(30)
    first = engine.generate(turn1, opts(True, 6))
    assert first.usage.prompt_tokens + 6 <= WINDOW
    turn2 = [*turn1, ChatMessage("assistant", first.text), ChatMessage("user", "And then, " + "why? " * 40)]
    warm = engine.generate(turn2, opts(True))
    cold = engine.generate(turn2, opts(False))
    assert warm.usage.prompt_tokens > WINDOW  # the new part crosses the window: still exact
    assert warm.timings.reused_prompt_tokens == ALIGN
    assert warm.token_ids == cold.token_ids


def test_a_call_shorter_than_the_window_asks_the_runtime_for_the_whole_window():
    """A window-sized KV cache refuses a max_length below the window (GroupQueryAttention's
    "KV cache capacity (50) must be at least local_window_size (128)")."""
    engine = Engine.get(SLIDING, execution="inline")
    out = engine.generate([ChatMessage("user", "hi")], opts(False, 4))
    assert out.usage.total_tokens < WINDOW and out.usage.completion_tokens == 4


def test_a_repeated_two_image_prompt_answers_warm_as_cold():
    engine = Engine.get(VISION, execution="inline")
    prompt = [
        ChatMessage(
            "user",
            [
                {"type": "text", "text": "First picture:"},
                {"type": "image", "image": png("red")},
                {"type": "text", "text": "Second picture:"},
                {"type": "image", "image": png("blue")},
                {"type": "text", "text": "Which one is red? " + words(random.Random(3), 60)},
            ],
        )
    ]
    _, warm, cold = warm_and_cold(engine, prompt, prompt)
    assert warm.usage.prompt_tokens > 2 * engine.package.image_tokens
    assert warm.timings.reused_prompt_tokens > 2 * engine.package.image_tokens
    assert warm.token_ids == cold.token_ids


# ---------------------------------------------------------------------- the runtime's facts
def _logits(model, ids, *, split: int | None = None, rewind_from: list[int] | None = None, run=None):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=4096, do_sample=False)
    gen = og.Generator(model, params)
    if rewind_from is not None:
        gen.append_tokens(rewind_from)
        gen.generate_next_token()
        gen.rewind_to(split)
        feed(gen, ids, split, run)
    elif split is not None:
        gen.append_tokens(ids[:split])
        feed(gen, ids, split, run)
    else:
        feed(gen, ids, 0, run)
    return np.asarray(gen.get_output("logits"))[0, -1].copy()


@pytest.mark.parametrize("path", [TINY_LLAMA, TINY_QWEN3, SLIDING], ids=lambda p: p.name)
def test_aligned_rewinds_reproduce_a_cold_prefill_bit_for_bit(path):
    """What the reuse decision relies on, in raw onnxruntime-genai: a rewind to a multiple of
    ALIGN tokens (within the window on a sliding-window model), then the rest, gives the cold
    prefill's logits exactly, for new parts of every length modulo 64 and past the window."""
    model = og.Model(str(path))
    tok = og.Tokenizer(model)
    pool = list(tok.encode(" ".join(WORDS))) * 8
    other = list(tok.encode(" ".join(reversed(WORDS))))
    rng = random.Random(7)
    for _ in range(12):
        keep = ALIGN * (1 if path == SLIDING else rng.choice([1, 2, 5, 9]))
        n = keep + rng.randrange(2, 700)
        ids = pool[:n]
        earlier = ids[:keep] + other[: rng.randrange(0, WINDOW - keep - 2 if path == SLIDING else 300)]
        np.testing.assert_array_equal(_logits(model, ids, split=keep, rewind_from=earlier), _logits(model, ids))


def test_feed_runs_end_at_multiples_of_align_and_the_last_holds_two_tokens():
    class Recorder:
        def __init__(self) -> None:
            self.runs: list[int] = []

        def append_tokens(self, ids: list[int]) -> None:
            self.runs.append(len(ids))

    for n, start, run in [
        (10_000, 0, 4096),
        (8193, 0, 4096),
        (4097, 0, 4096),
        (9000, 128, 4096),
        (300, 0, 100),
        (50, 0, 7),
    ]:
        rec = Recorder()
        feed(rec, list(range(n)), start, run)
        assert sum(rec.runs) == n - start and max(rec.runs) <= run and rec.runs[-1] >= 2
        ends = np.cumsum([start, *rec.runs])[1:-1]
        if run >= ALIGN:
            assert all(end % ALIGN == 0 for end in ends)


def test_reusable_prefix():
    ids = list(range(1000))
    assert reusable_prefix(ids[:300], 310, ids) == 256  # aligned down
    assert reusable_prefix(ids[:63], 70, ids) == 0  # shorter than one alignment step
    assert reusable_prefix(ids[:300], 310, ids[:130]) == 128  # at least two tokens are appended...
    assert reusable_prefix(ids[:300], 310, ids[:129]) == 64  # ...so 127 is not kept, and 64 is
    assert reusable_prefix(ids[:300], 310, ids, last_image_token=256) == 0  # must hold every image
    assert reusable_prefix(ids[:300], 310, ids, last_image_token=255) == 256
    assert reusable_prefix(ids[:100], 128, ids, window=128) == 64  # within the window
    assert reusable_prefix(ids[:100], 129, ids, window=128) == 0  # the generator held more than the window
    assert reusable_prefix([*ids[:200], 5], 210, ids) == 192


# ---------------------------------------------------------------------- the property
@dataclass
class Pair:
    kind: str
    first: list[ChatMessage] | RawPrompt
    second: list[ChatMessage] | RawPrompt
    must_reuse: bool = False


def pairs(family: Path, seed: int) -> list[Pair]:
    """Prompt pairs callers send one after the other, varied by ``seed``.

    The same system prompt with another question; a continued conversation; a raw prompt
    extended from the middle of a word (the first prompt's last token is not the second's);
    the same prompt again; a new part of 65 tokens (a row alone in a kernel tile); a
    conversation beyond 2K tokens where the window allows; a shared prefix that ends at a
    multiple of 64 tokens, or one token before it; images in an earlier turn (vision only).
    """
    rng = random.Random(seed)
    system = ChatMessage("system", words(rng, rng.randrange(60, 200)))
    q1, q2 = (
        ChatMessage("user", words(rng, rng.randrange(3, 30))),
        ChatMessage("user", words(rng, rng.randrange(3, 30))),
    )
    out = [
        Pair("another question", [system, q1], [system, q2], must_reuse=True),
        Pair("continued", [system, q1], [system, q1, ChatMessage("assistant", words(rng, 12)), q2], must_reuse=True),
        Pair("same prompt", [system, q1], [system, q1], must_reuse=True),
    ]
    text = words(rng, rng.randrange(120, 300))
    cut = rng.randrange(len(text) // 2, len(text) - 1)
    while text[cut - 1] == " ":
        cut -= 1
    out.append(Pair("mid-token", RawPrompt(text=text[:cut]), RawPrompt(text=text), must_reuse=True))
    ids = [int(i) for i in rng.choices(range(300, 1000), k=1000)]
    # 100 shared tokens, 65 new ones after them (a row alone in a kernel tile of the new part).
    out.append(Pair("new part of 65", RawPrompt(token_ids=ids[:100] + ids[700:720]), RawPrompt(token_ids=ids[:165])))
    # Shared prefixes that end at a multiple of 64 and one token before it (the first prompt
    # goes on with other tokens): the kept prefix is exactly, or one token short of, all of it.
    out.append(
        Pair("prefix of 256", RawPrompt(token_ids=ids[:256] + ids[600:640]), RawPrompt(token_ids=ids[:300]), True)
    )
    out.append(
        Pair("prefix of 255", RawPrompt(token_ids=ids[:255] + ids[600:640]), RawPrompt(token_ids=ids[:300]), True)
    )
    if family != TINY_LLAMA or seed % 2 == 0:  # the llama context is 4K: one long pair in two seeds
        long_system = ChatMessage("system", words(rng, rng.randrange(1800, 2200)))
        out.append(Pair("beyond 2K", [long_system, q1], [long_system, q1, ChatMessage("assistant", "ok"), q2], True))
    if family == VISION:
        picture = ChatMessage(
            "user",
            [{"type": "image", "image": png(rng.choice(["red", "blue"]))}, {"type": "text", "text": words(rng, 70)}],
        )
        out.append(Pair("image earlier", [picture], [picture, ChatMessage("assistant", "a colour"), q2], True))
    return out


@pytest.fixture
def prefill_logits(monkeypatch) -> list[np.ndarray]:
    """The last-token logits of every prompt the engine prefills (warm or cold), in call order.

    Recorded where the engine makes its generator, so a property can ask for bit-for-bit equal
    logits: greedy text on a random model is often the same answer for any prompt.
    """
    seen: list[np.ndarray] = []
    # Session's private _generator: the one place a prefill's logits can be read before decoding moves on
    make = Session._generator

    def recording(self, *args, **kwargs):
        generator, reused = make(self, *args, **kwargs)
        seen.append(np.asarray(generator.get_output("logits"))[0, -1].copy())
        return generator, reused

    monkeypatch.setattr(Session, "_generator", recording)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_warm_equals_cold_over_varied_prompt_pairs(engine: Engine, seed: int, prefill_logits):
    """Warm == cold, greedy, over the pairs of :func:`pairs`: the same tokens, and the same logits bit for bit.

    The runtime never refuses a rewind the engine asks for (a refusal would be caught and
    answered cold, hiding a wrong reuse decision behind a warning).
    """
    window = engine.package.sliding_window
    for pair in pairs(engine.package.path, seed):
        before, warm, cold = warm_and_cold(engine, pair.first, pair.second)
        warm_logits, cold_logits = prefill_logits[-2:]
        assert warm.token_ids == cold.token_ids, f"{pair.kind}: warm {warm.text!r} != cold {cold.text!r}"
        assert np.array_equal(warm_logits, cold_logits), f"{pair.kind}: {np.abs(warm_logits - cold_logits).max()}"
        assert cold.timings.reused_prompt_tokens == 0
        if window is not None and before.usage.total_tokens > window:
            assert warm.timings.reused_prompt_tokens == 0, pair.kind
        elif pair.must_reuse:
            assert warm.timings.reused_prompt_tokens >= ALIGN, pair.kind
    assert_no_refusal(engine)
