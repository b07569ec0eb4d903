"""Branches of the core helpers: token byte tables, stream parsing, schema bounds, options."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import onnxruntime_genai as og
import pytest

from conftest import TINY_LLAMA, TINY_QWEN3
from ryzenai_core.engine.engine import Engine
from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.generation.streaming import IncrementalDecoder, OutputParser
from ryzenai_core.generation.token_bytes import PROBE_TEXT, TokenBytes
from ryzenai_core.images import MAX_IMAGE_BYTES, image_parts, prepare_image
from ryzenai_core.messages import RawPrompt, ToolCall
from ryzenai_core.options import GenerationOptions, Guidance
from ryzenai_core.package.budget import ContextBudget
from ryzenai_core.prompt.formats import parse_tool_calls
from ryzenai_core.prompt.structured import CHARS_PER_TOKEN, bound_schema, output_bound, reserve, tool_call_guidance

# --- token_bytes: the per-token byte table --------------------------------------------------

BYTE_FALLBACK_DECODER = {
    "type": "Sequence",
    "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ],
}


def write_tokenizer(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def fallback_tokenizer(vocab: dict[str, Any], decoder: Any = BYTE_FALLBACK_DECODER, **extra: Any) -> dict[str, Any]:
    return {"model": {"type": "BPE", "byte_fallback": True, "vocab": vocab}, "decoder": decoder, **extra}


def test_byte_fallback_vocabulary_maps_byte_tokens_and_metaspace(tmp_path):
    vocab = {"<unk>": 0, "<0x0A>": 1, "<0xE2>": 2, "<0x82>": 3, "<0xAC>": 4, "\u2581Hello": 5, "world": 6, "▁": 7}
    added = [
        {"id": 8, "content": "<bos>", "special": True},
        {"id": 9, "content": "<extra>", "special": False},
        {"id": "10", "content": "bad id: skipped"},
        "not a dict",
    ]
    table = TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, fallback_tokenizer(vocab, added_tokens=added)))
    assert table is not None
    assert table.table[1] == b"\n"
    assert table.table[5] == b" Hello"
    assert table.table[7] == b" "
    assert table.table[8] == b""  # special tokens are no text
    assert table.table[9] == b"<extra>"  # an added token is its own text
    assert len(table.table) == 10
    # three byte tokens make one character; a character cut short is U+FFFD and the rest survives
    assert table.decode([8, 5, 7, 6, 2, 3, 4, 1]) == " Hello world€\n"
    assert table.decode([5, 2, 3, 6]) == " Hello\ufffdworld"
    assert table.decode([5, 99, -1]) == " Hello"  # unknown ids are no bytes


def test_a_single_byte_fallback_decoder_without_a_sequence_is_mapped(tmp_path):
    data = fallback_tokenizer({"<0x41>": 0, "b": 1}, decoder={"type": "ByteFallback"})
    table = TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, data))
    assert table is not None and table.decode([0, 1]) == "Ab"


@pytest.mark.parametrize(
    "decoder",
    [
        # Gemma-style decoders that strip the leading space: the runtime's decode is kept
        {
            "type": "Sequence",
            "decoders": [*BYTE_FALLBACK_DECODER["decoders"], {"type": "Strip", "content": " ", "start": 1, "stop": 0}],
        },
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
        {"type": "Sequence", "decoders": [{"type": "Metaspace"}, {"type": "ByteFallback"}]},
        # a Replace of anything else than "▁" -> " "
        {
            "type": "Sequence",
            "decoders": [{"type": "Replace", "pattern": {"String": "_"}, "content": " "}, {"type": "ByteFallback"}],
        },
        {
            "type": "Sequence",
            "decoders": [{"type": "Replace", "pattern": {"Regex": "\u2581"}, "content": " "}, {"type": "ByteFallback"}],
        },
        # no ByteFallback step at all, or no decoder
        {"type": "Sequence", "decoders": [{"type": "Fuse"}]},
        {"type": "Sequence", "decoders": None},
        None,
        "ByteFallback",
    ],
    ids=[
        "strip",
        "metaspace",
        "metaspace-seq",
        "replace-other",
        "replace-regex",
        "fuse-only",
        "empty-seq",
        "none",
        "str",
    ],
)
def test_byte_fallback_decoders_that_do_more_than_bytes_and_spaces_are_refused(tmp_path, decoder):
    data = fallback_tokenizer({"<0x41>": 0, "\u2581a": 1}, decoder=decoder)
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, data)) is None


def test_byte_fallback_decoder_needs_the_model_flag(tmp_path):
    data = fallback_tokenizer({"<0x41>": 0})
    data["model"]["byte_fallback"] = False
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, data)) is None


@pytest.mark.parametrize(
    "vocab",
    [{"<0xZZ>": 0}, {"<0x41>": "0"}, {}, {"<0x41>": -1}],
    ids=["bad-hex", "id-not-int", "empty", "negative-id"],
)
def test_byte_fallback_vocabularies_that_cannot_be_mapped(tmp_path, vocab):
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, fallback_tokenizer(vocab))) is None


def test_a_byte_fallback_lookalike_of_another_length_is_plain_text(tmp_path):
    table = TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, fallback_tokenizer({"<0x4>": 0, "<0x041>": 1})))
    assert table is not None and table.table == [b"<0x4>", b"<0x041>"]


def test_byte_level_vocabulary_with_a_piece_outside_the_alphabet_is_refused(tmp_path):
    good = {"model": {"type": "BPE", "vocab": {"\u0120a": 0, "b": 1}}, "decoder": {"type": "ByteLevel"}}
    table = TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, good))
    assert table is not None and table.table == [b" a", b"b"]
    # " " (a raw space) is not a character of GPT-2's byte alphabet (it spells a space as "Ġ")
    bad = {"model": {"type": "BPE", "vocab": {"\u0120a": 0, " b": 1}}, "decoder": {"type": "ByteLevel"}}
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, bad)) is None
    mixed = {**good, "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Fuse"}]}}
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, mixed)) is None


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", json.dumps({"model": "BPE"}), json.dumps({"model": {"type": "BPE", "vocab": []}})],
    ids=["invalid-json", "not-an-object", "model-not-dict", "vocab-not-dict"],
)
def test_unreadable_or_foreign_tokenizer_files_give_no_table(tmp_path, content):
    assert TokenBytes.from_tokenizer_json(write_tokenizer(tmp_path, content)) is None


def test_missing_or_undecodable_tokenizer_file_gives_no_table(tmp_path):
    assert TokenBytes.from_tokenizer_json(tmp_path / "absent.json") is None
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\xff\xfe{")  # not UTF-8
    assert TokenBytes.from_tokenizer_json(path) is None


@pytest.fixture(scope="module", params=[TINY_QWEN3, TINY_LLAMA], ids=["qwen3", "llama"])
def real_tokenizer(request):
    return request.param, og.Tokenizer(og.Model(str(request.param)))


def test_probe_of_a_real_package_accepts_its_table(real_tokenizer):
    folder, tok = real_tokenizer
    files = [folder / "tokenizer_config.json", folder / "tokenizer.json"]
    table = TokenBytes.for_runtime(files, tok.encode, lambda ids: tok.decode(list(ids)))
    assert table is not None
    ids = [int(i) for i in tok.encode(PROBE_TEXT)]
    assert table.decode(ids) == tok.decode(ids) == PROBE_TEXT


def test_probe_without_a_tokenizer_json_keeps_the_runtime_decode(real_tokenizer):
    folder, tok = real_tokenizer
    files = [folder / "tokenizer_config.json", folder / "genai_config.json"]
    assert TokenBytes.for_runtime(files, tok.encode, lambda ids: tok.decode(list(ids))) is None


def test_probe_that_the_runtime_cannot_run_keeps_the_runtime_decode(real_tokenizer):
    folder, tok = real_tokenizer

    def failing_decode(ids):
        raise RuntimeError("decode failed")

    assert TokenBytes.for_runtime([folder / "tokenizer.json"], tok.encode, failing_decode) is None
    # an encoder that returns nothing proves nothing
    assert TokenBytes.for_runtime([folder / "tokenizer.json"], lambda t: [], lambda ids: "") is None


def test_probe_rejects_a_table_that_decodes_differently(real_tokenizer, tmp_path):
    folder, tok = real_tokenizer
    # the same vocabulary with one token's text changed: the probe's decode no longer matches
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    ids = [int(i) for i in tok.encode(PROBE_TEXT)]
    piece = next(p for p, i in vocab.items() if i == ids[0])
    vocab[piece + "x" if piece + "x" not in vocab else piece + "y"] = vocab.pop(piece)
    altered = write_tokenizer(tmp_path, data)
    assert TokenBytes.from_tokenizer_json(altered) is not None
    assert TokenBytes.for_runtime([altered], tok.encode, lambda i: tok.decode(list(i))) is None


# --- streaming: decoding without a byte table, and the end of a parsed stream ----------------


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    tok = og.Tokenizer(og.Model(str(TINY_QWEN3)))
    table = TokenBytes.from_tokenizer_json(TINY_QWEN3 / "tokenizer.json")
    assert table is not None
    single = {b: i for i, b in enumerate(table.table) if len(b) == 1}
    return tok, single


def test_runtime_decoder_emits_fffd_for_bytes_that_never_become_text(qwen3_tokenizer):
    tok, byte_id = qwen3_tokenizer
    dec = IncrementalDecoder(lambda ids: tok.decode(list(ids)), max_stuck=3)
    lone = byte_id[b"\x80"]  # a continuation byte with no lead byte: never valid UTF-8
    deltas = [dec.feed(i) for i in (byte_id[b"a"], lone, lone, lone, byte_id[b"b"])]
    # held while it might still complete, then one U+FFFD, and the text after it is not lost
    assert deltas == ["a", "", "", "\ufffd", "b"]
    assert dec.flush() == ""


def test_runtime_decoder_flushes_an_incomplete_character_at_the_end(qwen3_tokenizer):
    tok, byte_id = qwen3_tokenizer
    dec = IncrementalDecoder(lambda ids: tok.decode(list(ids)))
    # "€" is E2 82 AC: the stream ends after two of its three bytes
    assert [dec.feed(i) for i in (byte_id[b"a"], byte_id[b"\xe2"], byte_id[b"\x82"])] == ["a", "", ""]
    assert dec.flush() == "\ufffd"
    assert dec.flush() == ""  # nothing is held any more


def qwen_parser(**kw: Any) -> OutputParser:
    return OutputParser(
        tool_markers=("<tool_call>", "</tool_call>"), parse_tool_calls=partial(parse_tool_calls, family="qwen3"), **kw
    )


def test_text_held_as_a_possible_marker_comes_out_at_the_end():
    p = qwen_parser()
    assert p.feed("see <tool") == ("see ", "")  # could be the start of <tool_call>
    assert p.finish() == ("<tool", "")
    assert p.tool_calls == []


def test_an_unclosed_tool_block_that_is_not_a_call_comes_back_as_text():
    p = qwen_parser()
    raw = "<tool_call>\nnot json\n</tool"  # the end of generation cut the closing marker
    assert p.feed(raw) == ("", "")
    assert p.finish() == (raw, "")
    assert p.tool_calls == []


def test_a_tool_block_cut_off_before_its_closing_marker_is_a_call():
    p = qwen_parser()
    assert p.feed('Sure.<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n') == ("Sure.", "")
    assert p.finish() == ("", "")
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("f", {"x": 1})]


def test_text_held_by_a_stop_string_comes_out_when_none_follows():
    p = OutputParser(stop=("END",))
    assert p.feed("the E") == ("the ", "")
    assert p.finish() == ("E", "")
    assert not p.stopped


def test_a_json_answer_held_for_a_call_keeps_the_stop_filter_tail():
    llama = partial(parse_tool_calls, family="llama3")
    p = OutputParser(stop=("END",), json_tool_calls=True, parse_tool_calls=llama)
    assert p.feed('{"name": "f", "parameters": {}} E') == ("", "")
    # the held "E" is part of the answer: with it, the text is not a call and comes back whole
    assert p.finish() == ('{"name": "f", "parameters": {}} E', "")
    assert p.tool_calls == []

    p = OutputParser(stop=("END",), json_tool_calls=True, parse_tool_calls=llama)
    assert p.feed('{"name": "f", "parameters": {"a": 1}}') == ("", "")
    assert p.finish() == ("", "")
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("f", {"a": 1})]


def test_text_a_parser_returns_beside_json_calls_is_content():
    def parse(text: str) -> tuple[str, list[ToolCall]]:
        body, _, note = text.partition("\n")
        call = json.loads(body)
        return note, [ToolCall(call["name"], call["parameters"], "call_0")]

    p = OutputParser(json_tool_calls=True, parse_tool_calls=parse)
    assert p.feed('{"name": "g", "parameters": {}}\nthen done') == ("", "")
    assert p.finish() == ("then done", "")
    assert [c.name for c in p.tool_calls] == ["g"]


# --- structured: the tokens a schema's longest value takes at a realistic cost ----------------

FREE = 2 + math.ceil(32 / CHARS_PER_TOKEN)  # a value the bounds cannot reach counts as a 32-character string


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        # a literal counts the bytes of its longer spelling: "ü" may be written as the 6-byte escape \u00fc
        ({"const": "h\u00e9llo"}, len('"h\\u00e9llo"')),
        ({"const": None}, 4),
        ({"enum": ["a", "\u00fc", 10]}, len('"\\u00fc"')),
        ({"enum": ["\U0001f680"]}, len('"\\ud83d\\ude80"')),
        ({"enum": []}, FREE),  # an empty enum is no bound: a free value
        ({"anyOf": [{"type": "boolean"}, {"type": "null"}]}, 5),
        # the worst of the branches and the type beside them; a string costs its quotes and 3 characters a token
        ({"oneOf": [{"type": "string", "maxLength": 30}], "type": "null"}, 2 + 10),
        ({"oneOf": [{"type": "string", "maxLength": 3}], "type": "null"}, 4),
        ({"type": "string", "maxLength": 300}, 2 + 100),  # the caller's own long bound, at the same rate
        ({"type": "string", "maxLength": 3, "format": "date"}, FREE),
        ({"type": "string", "maxLength": 3, "pattern": "^a+$"}, FREE),
        ({"type": "string"}, FREE),
        ({"type": "integer", "minimum": -999, "maximum": 5}, 4),
        ({"type": "number", "minimum": 0, "maximum": 10}, 2 + 5),
        ({"type": "mystery"}, FREE),
        ({}, FREE),
        ({"properties": {"a": {"type": "boolean"}}, "additionalProperties": False}, len('{"a":}') + 5),
        ({"type": "array"}, 2 + 8 * FREE + 7),  # eight free items
        ({"type": "array", "items": False, "prefixItems": [{"type": "null"}, True]}, 2 + 4 + FREE + 1),  # a pair
        ({"type": "array", "prefixItems": [{"type": "null"}], "maxItems": 1}, 2 + 4),
        ({"type": "array", "items": {"type": "boolean"}, "maxItems": 3}, 2 + 3 * 5 + 2),
        ({"type": "object"}, 2 + 8 * (FREE + 1 + FREE) + 7),  # free keys, no patternProperties
        ({"type": "object", "maxProperties": 1}, 2 + FREE + 1 + FREE),
    ],
)
def test_output_bound_of_a_schema(schema, expected):
    assert output_bound(schema) == expected


def test_output_bound_counts_a_long_string_at_the_share_it_is_given():
    """While sizing the library's own bounds, a longer bound the caller set takes the same share (``cap``)."""
    assert output_bound({"type": "string", "maxLength": 300}, cap=30) == 2 + 10
    assert output_bound({"type": "string", "maxLength": 9}, cap=30) == 2 + 3


def test_output_bound_follows_refs_and_stops_at_a_cycle():
    defs = {"flag": {"type": "boolean"}, "loop": {"$ref": "#/$defs/loop"}}
    assert output_bound({"$defs": defs, "$ref": "#/$defs/flag"}) == 5
    assert output_bound({"definitions": {"flag": {"type": "null"}}, "$ref": "#/definitions/flag"}) == 4
    assert output_bound({"$defs": defs, "$ref": "#/$defs/absent"}) == FREE
    # a reference to itself is not followed forever: past 20 levels it counts as a free value
    assert output_bound({"$defs": defs, "$ref": "#/$defs/loop"}) == FREE


def test_bound_schema_refuses_what_is_not_a_schema():
    with pytest.raises(InvalidRequestError, match=r"a JSON schema must be a dict, got list"):
        bound_schema([{"type": "string"}], 100)  # type: ignore[arg-type]


def test_bound_schema_counts_free_keys_and_bounds_them():
    out = bound_schema({"type": "object"}, 200)
    ((pattern, value),) = out["patternProperties"].items()
    assert out["additionalProperties"] is False
    assert value["type"] == ["string", "number", "boolean", "null"]  # any value of a dict field: a scalar
    assert int(pattern.rsplit(",", 1)[1].split("}")[0]) == 40  # a free-form key: up to 40 characters
    # each value keeps room for a sentence; fewer keys are allowed rather than shorter strings
    assert value["maxLength"] >= 32 and 1 <= out["maxProperties"] < 8
    assert output_bound(out) <= 199  # its longest value fits the budget at a realistic cost (one token kept)
    wide = bound_schema({"type": "object"}, 400)
    assert wide["maxProperties"] > out["maxProperties"] and output_bound(out) < output_bound(wide) <= 399


def test_bound_schema_refuses_only_a_budget_that_cannot_hold_the_shortest_value():
    """The worst case need not fit (the closing while decoding keeps the budget); the shortest value must."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}}},
        "required": ["a", "b"],
    }
    with pytest.raises(InvalidRequestError) as err:
        bound_schema(schema, 10, overhead=3)
    msg = str(err.value)
    assert "max_new_tokens=10 is too small for this schema: its framing (3 tokens), its shortest value" in msg
    need = int(msg.rsplit("at least ", 1)[1])
    assert need == 3 + len('{"a":"","b":[]}') + reserve(schema)
    out = bound_schema(schema, need, overhead=3)  # the advised budget is enough
    assert out["properties"]["a"]["maxLength"] == 16  # strings keep a floor: at this budget the closing decides
    assert output_bound(out) + 3 > need
    with pytest.raises(InvalidRequestError):
        bound_schema(schema, need - 1, overhead=3)


def test_a_forced_tool_call_needs_tools():
    with pytest.raises(InvalidRequestError, match="no tools were given; bind at least one tool"):
        tool_call_guidance("qwen3", [], 256)


# --- options, raw prompts, images, budgets -----------------------------------------------------


def test_guidance_needs_a_schema_and_a_json_schema_must_be_an_object():
    with pytest.raises(
        InvalidRequestError, match="guidance of type 'regex' needs a non-empty schema, pattern or grammar"
    ):
        Guidance(type="regex", data="  ")
    with pytest.raises(InvalidRequestError, match="json_schema guidance must be a JSON object"):
        Guidance(type="json_schema", data="[1, 2]")
    assert json.loads(Guidance(type="json_schema", data={"type": "integer"}).data) == {"type": "integer"}


def test_stop_option_takes_none_a_string_or_a_list():
    assert GenerationOptions(stop=None).stop == ()
    assert GenerationOptions(stop="END").stop == ("END",)
    assert GenerationOptions(stop=["a", "b"]).stop == ("a", "b")


def test_raw_prompt_must_not_be_empty():
    with pytest.raises(InvalidRequestError, match="the raw prompt is empty; send at least one token"):
        RawPrompt(text="")
    with pytest.raises(InvalidRequestError, match="the raw prompt has no token ids; send at least one token"):
        RawPrompt(token_ids=[])
    assert RawPrompt(token_ids=[1]).token_ids == [1]


def test_image_parts_of_text_content_are_none():
    assert image_parts("just text") == []
    assert image_parts(None) == []


def test_an_image_part_without_a_source_says_what_to_send():
    with pytest.raises(
        InvalidRequestError, match=r"image 1 is an image part of a form .* \(keys 'type'\); send one of"
    ):
        prepare_image({"type": "image"}, "image 1")


def test_an_image_over_the_size_limit_is_refused_before_decoding(tmp_path):
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.truncate(MAX_IMAGE_BYTES + 1)  # sparse: no 50 MB written
    with pytest.raises(InvalidRequestError) as err:
        prepare_image({"type": "image", "path": str(big)})
    assert f"is {MAX_IMAGE_BYTES + 1:,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; send a smaller image" in str(
        err.value
    )
    with pytest.raises(InvalidRequestError, match=f"the image is {MAX_IMAGE_BYTES + 1:,} bytes, over the limit"):
        prepare_image({"type": "image", "image": bytes(MAX_IMAGE_BYTES + 1)})


def test_budget_bounded_output_and_dict():
    b = ContextBudget(window=512, prompt_limit=256, prefill_buckets=(64, 128), default_max_new_tokens=1000)
    assert b.bounded_output_tokens == 511  # the package default, but never more than the window leaves
    assert ContextBudget(window=512, prompt_limit=256, default_max_new_tokens=100).bounded_output_tokens == 100
    d = b.to_dict()
    assert d["prefill_buckets"] == [64, 128] and d["decode_buckets"] == []
    assert d["window"] == 512 and d["default_max_new_tokens"] == 1000
    assert json.loads(json.dumps(d)) == d


# --- engine: the inline backend ------------------------------------------------------------------


def test_engine_refuses_an_unknown_execution():
    with pytest.raises(InvalidRequestError, match="execution 'thread' is not supported; use 'process' or 'inline'"):
        Engine.get(TINY_LLAMA, execution="thread")  # type: ignore[arg-type]


def test_inline_backend_loads_in_this_process():
    engine = Engine.get(TINY_LLAMA, execution="inline")
    assert engine.load() is not None and engine.inline_session().loaded


def test_text_count_cache_stays_bounded_and_correct():
    engine = Engine.get(TINY_LLAMA, execution="inline")
    for i in range(1030):
        engine.count_text(f"w{i}")
    assert engine.inline_session().tokens.count_text.cache_info().currsize <= 1024
    assert engine.count_text("w3 w4") == len(engine.encode("w3 w4"))
