"""Text from the wild reaches the model whole, or fails with a typed error naming where.

PDF and OCR loaders of both frameworks produce text with NUL characters; byte-level
decoding with ``surrogateescape`` produces lone surrogates. onnxruntime-genai's tokenizer
reads a C string (it stops at a NUL) and refuses a surrogate with a bare ``TypeError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import ChatMessage, Engine, InvalidRequestError
from ryzenai_core.options import validated_options

ROOT = Path(__file__).resolve().parents[1]
QA_MODEL = ROOT / "core" / "models" / "tiny-qa-llama"
DEMO = ROOT / "core" / "demo_docs"


@pytest.mark.parametrize("folder", [TINY_LLAMA, TINY_QWEN3, TINY_GEMMA3], ids=lambda p: p.name)
def test_nul_is_one_byte_token_and_the_rest_is_kept(folder: Path) -> None:
    engine = Engine.get(folder, execution="inline")
    before, after = "The lab is in Qelmarsh.", " It was founded in 2011."
    ids = engine.encode(before + "\x00" + after)
    assert len(ids) == len(engine.encode(before)) + 1 + len(engine.encode(after))
    assert ids[: len(engine.encode(before))] == engine.encode(before)
    assert ids[-len(engine.encode(after)) :] == engine.encode(after)


def test_nul_at_the_end_of_the_system_prompt_keeps_the_conversation() -> None:
    engine = Engine.get(TINY_LLAMA, execution="inline")
    plain = [ChatMessage("system", "Be brief."), ChatMessage("user", "What is the capital of Qelmarsh?")]
    with_nul = [ChatMessage("system", "Be brief.\x00"), plain[1]]
    assert engine.count_tokens(with_nul) == engine.count_tokens(plain) + 1
    tail = engine.encode(engine.render(plain))[-12:]
    assert engine.encode(engine.render(with_nul))[-12:] == tail


def _demo_question() -> tuple[str, str, list[str]]:
    spec = json.loads((DEMO / "questions.json").read_text(encoding="utf-8"))
    q = spec["questions"][0]
    docs = [(DEMO / name).read_text(encoding="utf-8").strip() for name in q["documents"]]
    return spec["system"], q, docs  # type: ignore[return-value]


@pytest.mark.parametrize("where", ["system", "document"])
def test_rag_answer_survives_a_nul(where: str) -> None:
    """A NUL (as PDF text has) before the answer's sentence does not cut the prompt there."""
    system, q, docs = _demo_question()
    if where == "system":
        system += "\x00"
    else:
        docs[0] = docs[0].replace("Qelmarsh.", "Qelmarsh.\x00", 1)
        assert "\x00" in docs[0]
    messages = [
        ChatMessage("system", system),
        ChatMessage("user", "Context: " + "\n\n".join(docs) + f"\n\nQuestion: {q['question']}"),
    ]
    engine = Engine.get(QA_MODEL, execution="inline")
    answer = engine.generate(messages, validated_options(max_new_tokens=16, temperature=0)).text.strip()
    assert answer == q["answer"]


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([ChatMessage("user", "ab\ud800cd")], "the content of message #0 (user)"),
        ([ChatMessage("system", "ok"), ChatMessage("user", "x" * 30 + "\udcff")], "the content of message #1 (user)"),
        (
            [ChatMessage("user", "hi"), ChatMessage("assistant", "fine", reasoning="\udc80")],
            "the reasoning of message #1 (assistant)",
        ),
    ],
)
def test_lone_surrogate_is_a_typed_error_naming_message_and_position(messages, where: str) -> None:
    engine = Engine.get(TINY_QWEN3, execution="process")
    for call in (engine.count_tokens, engine.generate):
        with pytest.raises(InvalidRequestError) as info:
            call(messages)
        text = str(info.value)
        assert where in text and "lone surrogate" in text and "at character" in text
        assert "errors='replace'" in text
    assert engine.generate([ChatMessage("user", "hi")], validated_options(max_new_tokens=2)).usage is not None


def test_lone_surrogate_in_raw_text_is_a_typed_error() -> None:
    engine = Engine.get(TINY_LLAMA, execution="inline")
    with pytest.raises(InvalidRequestError, match=r"the prompt holds a lone surrogate '\\ud800' at character 3"):
        engine.encode("abc\ud800")
