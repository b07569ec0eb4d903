"""Streaming decode on a SentencePiece-style tokenizer (Llama 2, Mistral, Phi-3).

Such tokenizers mark a word's start with ``\u2581`` and their decoder strips the leading space,
so a token decoded alone loses the space it stands for: a streamer that decodes each token on
its own would send ``Hello,worldagain``. The fixture tokenizer (scripts/build_fixtures.py
--tokenizers-only) sits beside tiny-llama's weights; onnxruntime-genai's own tokenizer decodes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, TINY_LLAMA
from ryzenai_core import Engine, RawPrompt
from ryzenai_core.generation.streaming import IncrementalDecoder
from ryzenai_core.generation.token_bytes import TokenBytes
from ryzenai_core.options import validated_options

og = pytest.importorskip("onnxruntime_genai")

SENTENCEPIECE = FIXTURES / "tokenizers" / "sentencepiece-llama2"
TEXTS = ["Hello, world again", "The NPU runs fixed shapes.\nEach prompt is padded: déjà vu 42!", "  two  spaces"]
BOS = 1


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sp") / "tiny-llama-sentencepiece"
    shutil.copytree(TINY_LLAMA, out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SENTENCEPIECE / name, out / name)
    (out / "special_tokens_map.json").unlink(missing_ok=True)
    return out


@pytest.fixture(scope="module")
def tokenizer(folder: Path):
    return og.Tokenizer(og.Model(str(folder)))


def test_the_fixture_is_a_sentencepiece_tokenizer_that_strips_the_leading_space(tokenizer):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(SENTENCEPIECE / "tokenizer.json"))
    encoding = hf.encode("Hello, world again")
    assert "\u2581w" in encoding.tokens and hf.decode(encoding.ids) == "Hello, world again"
    word = hf.token_to_id("\u2581w")
    assert hf.decode([word]) == "w"  # decoded alone, the word's space is gone
    assert tokenizer.decode([BOS, *tokenizer.encode("Hello, world again")]) == "Hello, world again"


@pytest.fixture(scope="module", params=["onnxruntime-genai", "tokenizers"])
def decode(request, tokenizer):
    """The runtime's decode, and Hugging Face's, which applies the declared decoder to the letter:
    a lone ``▁w`` is ``w`` (onnxruntime-genai strips the space only after ``<s>``)."""
    if request.param == "onnxruntime-genai":
        return lambda ids: tokenizer.decode(list(ids))
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(SENTENCEPIECE / "tokenizer.json"))
    return lambda ids: hf.decode(list(ids))


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("bos", [True, False], ids=["after-bos", "bare"])
def test_streamed_text_is_the_full_decode(tokenizer, decode, text, bos):
    ids = [int(i) for i in tokenizer.encode(text)]
    ids = [BOS, *ids] if bos else ids
    decoder = IncrementalDecoder(decode)
    pieces = [decoder.feed(i) for i in ids]
    streamed = "".join(pieces) + decoder.flush()
    assert streamed == decode(ids)
    if bos and not text.startswith(" "):
        assert streamed == text  # the round trip is exact after <s>, as in a Llama 2 prompt
    assert "worldagain" not in streamed and "Hello,world" not in streamed


def test_the_engine_streams_what_it_decodes_on_a_sentencepiece_package(folder):
    engine = Engine.get(folder, execution="inline")
    table = TokenBytes.for_runtime([folder / "tokenizer.json"], engine.encode, engine.decode)
    assert table is None  # the decoder strips a space: streamed by windows of the runtime's decode
    prompt = RawPrompt(token_ids=[BOS, *engine.encode("Hello, world again. The NPU")])
    chunks = list(engine.stream(prompt, validated_options(max_new_tokens=48, temperature=0)))
    streamed = "".join(c.text for c in chunks)
    ids = [i for c in chunks for i in c.token_ids]
    assert len(ids) >= 8
    assert streamed == engine.decode(ids)
