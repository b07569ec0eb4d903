"""Incremental detokenization, stop strings and reasoning/tool splitting (real tokenizer)."""

from __future__ import annotations

import json

import onnxruntime_genai as og
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from byte_reference import reference_decode, token_bytes
from conftest import TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from ryzenai_core.engine import Engine
from ryzenai_core.messages import ToolCall
from ryzenai_core.streaming import IncrementalDecoder, OutputParser, StopFilter

# onnxruntime-genai 0.14's tokenizer loses characters around "<<" (an upstream bug), so exact
# encode/decode round trips are only checked on newer runtimes.
OGA_ROUND_TRIPS = tuple(int(x) for x in og.__version__.split(".")[:2]) >= (0, 15)


@pytest.fixture(scope="module", params=[TINY_QWEN3, TINY_LLAMA], ids=["qwen3", "llama"])
def tokenizer(request):
    return og.Tokenizer(og.Model(str(request.param)))


TEXT = st.text(
    alphabet=st.sampled_from(list("abc xyz\n{}\"<>/") + list("混合推理词元档位") + ["🚀", "é", "ß", "한", "🤖"]),
    max_size=40,
)


def stream_text(tok, ids):
    dec = IncrementalDecoder(lambda x: tok.decode(list(x)))
    deltas = [dec.feed(i) for i in ids]
    deltas.append(dec.flush())
    return deltas


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT)
def test_deltas_equal_full_decode_of_real_text(tokenizer, text):
    ids = list(tokenizer.encode(text))
    deltas = stream_text(tokenizer, ids)
    full = tokenizer.decode(ids) if ids else ""  # 0.14 crashes on decode([])
    assert "".join(deltas) == full
    if OGA_ROUND_TRIPS:
        assert full == text


def test_multibyte_characters_split_across_tokens_are_held(tokenizer):
    text = "🚀🤖 混合推理 한국어"
    ids = list(tokenizer.encode(text))
    # some characters really are split: a lone piece of them decodes to nothing
    assert any(tokenizer.decode([i]) in ("", "\ufffd") for i in ids)
    deltas = stream_text(tokenizer, ids)
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


@pytest.fixture(scope="module", params=[TINY_QWEN3, TINY_LLAMA, TINY_GEMMA3], ids=["qwen3", "llama", "gemma3"])
def session_and_bytes(request):
    session = Engine.get(request.param, execution="inline").backend.session
    return session, token_bytes(request.param)


def core_stream(session, ids):
    """The deltas the generation loop streams for ``ids``."""
    dec = IncrementalDecoder(session.decode)
    deltas = [dec.feed(i) for i in ids]
    deltas.append(dec.flush())
    return deltas


# Random ids hit lone continuation bytes, lead bytes never completed, byte 0 and special
# tokens: whatever the bytes, the stream is their text with invalid bytes as U+FFFD.
@pytest.mark.xfail(strict=True, reason="the runtime's decode drops the text after invalid bytes")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(0, 1023), max_size=30))
def test_streamed_text_equals_the_byte_level_decode_of_random_ids(session_and_bytes, ids):
    session, table = session_and_bytes
    expected = reference_decode(table, ids)
    deltas = core_stream(session, ids)
    assert "".join(deltas) == expected
    assert session.decode(ids) == expected


def reference_stop(text, stops):
    for end in range(1, len(text) + 1):
        starts = [end - len(s) for s in stops if end >= len(s) and text[end - len(s) : end] == s]
        if starts:
            return text[: min(starts)], True
    return text, False


def split_at(text, cuts):
    cuts = sorted({c % (len(text) + 1) for c in cuts})
    out, last = [], 0
    for c in cuts:
        out.append(text[last:c])
        last = c
    out.append(text[last:])
    return out


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet="abc<>/ \n", max_size=30),
    stops=st.lists(st.text(alphabet="abc<>/ \n", min_size=1, max_size=5), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 100), max_size=10),
)
def test_stop_strings_never_leak_whatever_the_boundaries(text, stops, cuts):
    f = StopFilter(stops)
    out = "".join(f.feed(p) for p in split_at(text, cuts)) + f.flush()
    expected, stopped = reference_stop(text, stops)
    assert out == expected
    assert f.stopped == stopped
    for s in stops:
        assert s not in out


def parse_qwen(text):
    calls, content = [], text
    while "<tool_call>" in content and "</tool_call>" in content:
        a = content.index("<tool_call>")
        b = content.index("</tool_call>")
        body = json.loads(content[a + len("<tool_call>") : b])
        calls.append(ToolCall(body["name"], body["arguments"], f"call_{len(calls)}"))
        content = content[:a] + content[b + len("</tool_call>") :]
    return content.strip(), calls


RAW = "<think>\nI should call the tool.\n\n</think>\n\nSure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>"


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(RAW)), max_size=12))
def test_reasoning_and_tool_calls_are_split_out_at_any_boundary(cuts):
    p = OutputParser(reasoning_markers=("<think>", "</think>"), tool_markers=("<tool_call>", "</tool_call>"),
                     parse_tool_calls=parse_qwen)
    content, reasoning = [], []
    for piece in split_at(RAW, cuts):
        c, r = p.feed(piece)
        content.append(c)
        reasoning.append(r)
    c, r = p.finish()
    content.append(c)
    reasoning.append(r)
    assert "".join(reasoning) == "I should call the tool."
    assert "".join(content) == "Sure."
    assert [(t.name, t.arguments) for t in p.tool_calls] == [("f", {"x": 3})]


def test_prompt_that_opened_reasoning():
    p = OutputParser(reasoning_markers=("<think>", "</think>"), start_in_reasoning=True)
    c1, r1 = p.feed("\nhmm\n</think>\n\nanswer")
    c2, r2 = p.finish()
    assert (c1 + c2, r1 + r2) == ("answer", "hmm")


def test_json_tool_call_is_held_and_parsed():
    def parse(text):
        body = json.loads(text)
        return "", [ToolCall(body["name"], body["parameters"], "call_1")]

    p = OutputParser(json_tool_calls=True, parse_tool_calls=parse)
    assert p.feed('{"name": "get_weather", ') == ("", "")
    assert p.feed('"parameters": {"city": "Paris"}}') == ("", "")
    assert p.finish() == ("", "")
    assert p.tool_calls[0].arguments == {"city": "Paris"}


def test_json_looking_text_that_is_not_a_call_comes_back_as_text():
    def parse(text):
        return text, []

    p = OutputParser(json_tool_calls=True, parse_tool_calls=parse)
    p.feed("{not json")
    assert p.finish() == ("{not json", "")
    assert p.tool_calls == []


def test_stop_string_ends_the_answer_inside_a_parser():
    p = OutputParser(stop=("END",))
    assert p.feed("hello E") == ("hello ", "")
    assert p.feed("ND and more") == ("", "")
    assert p.stopped
    assert p.finish() == ("", "")
