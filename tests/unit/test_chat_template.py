from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, REPLICAS, ROOT, TINY_GEMMA3, TINY_LLAMA, TINY_QWEN3
from ryzenai_core import ChatTemplateError, InvalidRequestError, ModelPackage
from ryzenai_core.generation.streaming import OutputParser
from ryzenai_core.messages import ChatMessage, ToolCall
from ryzenai_core.prompt.formats import (
    FAMILIES,
    end_of_turn_markers,
    family_for_model_type,
    has_tool_calls,
    infer_family,
    parse_tool_calls,
    reasoning_markers,
    tool_call_markers,
)
from ryzenai_core.prompt.sandbox import compile_template
from ryzenai_core.prompt.sources import FALLBACK_TEMPLATES, builtin_template, special_tokens_from_config
from ryzenai_core.prompt.templates import ChatTemplate

TEMPLATES = ROOT / "core" / "templates"
GOLDENS = json.loads((FIXTURES / "template_goldens.json").read_text(encoding="utf-8"))["cases"]
LLAMA_SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def from_hf(d: dict[str, Any]) -> ChatMessage:
    """A ChatMessage from the Hugging Face dict form (the inverse of ChatMessage.to_hf)."""
    calls = [
        ToolCall(name=c["function"]["name"], arguments=c["function"]["arguments"], id=c.get("id", ""))
        for c in d.get("tool_calls", [])
    ]
    return ChatMessage(
        role=d["role"],
        content=d.get("content", ""),
        tool_calls=calls,
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
        reasoning=d.get("reasoning_content"),
    )


def template_file(name: str, **kwargs: Any) -> ChatTemplate:
    return ChatTemplate((TEMPLATES / name).read_bytes().decode("utf-8"), **kwargs)


# ---------------------------------------------------------------------- goldens (transformers parity)
def test_goldens_cover_the_required_cases():
    names = {c["name"] for c in GOLDENS}
    for required in (
        "llama/user",
        "llama/system_user",
        "llama/multi_turn",
        "llama/tools",
        "llama/tool_call_and_result",
        "llama/no_generation_prompt",
        "qwen3/tools",
        "qwen3/tool_calls_and_results",
        "qwen3/enable_thinking_true",
        "qwen3/enable_thinking_false",
        "qwen3/enable_thinking_none",
        "qwen3/reasoning_content_last",
        "qwen3/no_generation_prompt",
        "gemma3/system_user",
    ):
        assert required in names
    assert {c["template"] for c in GOLDENS} == set(FALLBACK_TEMPLATES.values())


@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_renders_like_transformers(case):
    messages = [from_hf(m) for m in case["messages"]]
    # The HF dicts in the goldens are exactly what ChatMessage.to_hf() gives (key order included).
    assert [json.dumps(m.to_hf(), ensure_ascii=False) for m in messages] == [
        json.dumps(m, ensure_ascii=False) for m in case["messages"]
    ]
    template = template_file(case["template"], special_tokens=case["special_tokens"])
    kwargs = dict(case["kwargs"])
    enable_thinking = kwargs.pop("enable_thinking", None)
    out = template.render(
        messages,
        tools=case["tools"],
        add_generation_prompt=case["add_generation_prompt"],
        enable_thinking=enable_thinking,
        **kwargs,
    )
    assert out == case["expected"]


@pytest.mark.parametrize("folder", [TINY_LLAMA, TINY_QWEN3, TINY_GEMMA3], ids=lambda p: p.name)
def test_package_special_tokens_match_the_ones_transformers_used(folder):
    template = ChatTemplate.for_package(ModelPackage.open(folder))
    used = {json.dumps(c["special_tokens"], sort_keys=True) for c in GOLDENS if c["tokenizer"] == folder.name}
    assert used == {json.dumps(template.special_tokens, sort_keys=True)}


def test_builtin_templates_are_the_fixture_templates():
    for folder, name in ((TINY_LLAMA, "llama-3.2-instruct.jinja"), (TINY_QWEN3, "qwen3.jinja")):
        assert builtin_template(name) == (folder / "chat_template.jinja").read_bytes().decode("utf-8")
    assert builtin_template("gemma-3-it.jinja") == (TINY_GEMMA3 / "chat_template.jinja").read_text(encoding="utf-8")


# ---------------------------------------------------------------------- packages and fallbacks
@pytest.mark.parametrize(
    ("folder", "family", "bos", "supports_tools", "supports_thinking"),
    [
        (TINY_LLAMA, "llama3", "<|begin_of_text|>", True, False),
        (TINY_QWEN3, "qwen3", None, True, True),
        (TINY_GEMMA3, "gemma3", "<bos>", False, False),
    ],
    ids=["llama", "qwen3", "gemma3"],
)
def test_fixture_package_templates_load(folder, family, bos, supports_tools, supports_thinking):
    template = ChatTemplate.for_package(ModelPackage.open(folder))
    assert template.family == family
    assert template.source_name == "chat_template.jinja"
    assert not template.is_fallback and template.fallback_message is None
    assert template.bos_token == bos
    assert template.supports_tools is supports_tools
    assert template.supports_thinking is supports_thinking
    assert template.supports_system_role
    assert template.render([ChatMessage("user", "Hi")])


def _without_template(copy_package, src: Path, model_type: str | None = None) -> ModelPackage:
    folder = copy_package(src)
    (folder / "chat_template.jinja").unlink()
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    if model_type is not None:
        gcfg = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))
        gcfg["model"]["type"] = model_type
        (folder / "genai_config.json").write_text(json.dumps(gcfg), encoding="utf-8")
    return ModelPackage.open(folder)


@pytest.mark.parametrize(
    ("src", "model_type", "file", "family"),
    [
        (TINY_LLAMA, None, "llama-3.2-instruct.jinja", "llama3"),
        (TINY_QWEN3, None, "qwen3.jinja", "qwen3"),
        (TINY_GEMMA3, "gemma3", "gemma-3-it.jinja", "gemma3"),
        (TINY_GEMMA3, "gemma3_text", "gemma-3-it.jinja", "gemma3"),
        (TINY_GEMMA3, "llama", "llama-3.2-instruct.jinja", "llama3"),  # this fixture's real type
        (TINY_GEMMA3, "gemma2", "gemma-3-it.jinja", "gemma3"),
        (TINY_QWEN3, "qwen2", "chatml.jinja", "chatml"),
        (TINY_LLAMA, "phi3", "chatml.jinja", "chatml"),
    ],
)
def test_fallback_is_chosen_by_model_type(copy_package, caplog, src, model_type, file, family):
    pkg = _without_template(copy_package, src, model_type)
    assert pkg.chat_template_source is None
    with caplog.at_level(logging.WARNING, logger="ryzenai_core.prompt.templates"):
        template = ChatTemplate.for_package(pkg)
    assert template.is_fallback
    assert template.source_name == f"fallback:{file}"
    assert template.family == family
    assert template.source == builtin_template(file)
    assert template.fallback_message and file in template.fallback_message and pkg.name in template.fallback_message
    assert any(file in r.getMessage() for r in caplog.records)
    assert template.render([ChatMessage("system", "S"), ChatMessage("user", "Hi")])


def test_replica_without_template_falls_back_to_chatml():
    template = ChatTemplate.for_package(ModelPackage.open(REPLICAS / "Qwen-2.5-1.5B-Instruct-onnx-ryzenai-npu"))
    assert template.source_name == "fallback:chatml.jinja"
    assert template.family == "chatml"
    assert template.end_of_turn == ["<|im_end|>"]
    assert template.eos_token == "<|im_end|>" and template.bos_token is None


def test_template_in_tokenizer_config_and_override(copy_package, tmp_path):
    folder = copy_package(TINY_QWEN3)
    (folder / "chat_template.jinja").unlink()
    pkg = ModelPackage.open(folder)
    template = ChatTemplate.for_package(pkg)
    assert template.source_name == "tokenizer_config.json"
    assert template.family == "qwen3"

    over = ChatTemplate.for_package(pkg, "{{ eos_token }}{{ messages[0].content }}")
    assert over.source_name == "override" and not over.is_fallback
    assert over.family == "qwen3"  # cannot be told from the source: the model type decides
    assert over.render([ChatMessage("user", "x")]) == "<|im_end|>x"

    path = tmp_path / "t.jinja"
    path.write_text("{{ bos_token }}[{{ messages[0].content }}]", encoding="utf-8")
    assert ChatTemplate.for_package(pkg, path).render([ChatMessage("user", "y")]) == "[y]"
    assert ChatTemplate.for_package(pkg, str(path)).render([ChatMessage("user", "y")]) == "[y]"


def test_family_comes_from_the_source_before_the_model_type():
    smol = ModelPackage.open(REPLICAS / "Phi-3-mini-4k-instruct-onnx-ryzenai-npu-1.4")
    assert smol.model_type == "phi3"
    assert ChatTemplate.for_package(smol).family == "llama3"  # its template is a Llama 3 one
    assert ChatTemplate("<|im_start|>{{ messages }}").family == "chatml"
    assert ChatTemplate("{{ messages }}").family == "plain"  # no control tokens it knows: no format assumed
    assert ChatTemplate("{{ messages }}", family="gemma3").family == "gemma3"
    with pytest.raises(InvalidRequestError, match="family 'mistral'"):
        ChatTemplate("{{ messages }}", family="mistral")


def test_tokenizer_config_special_tokens_as_dicts(copy_package):
    folder = copy_package(TINY_LLAMA)
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["bos_token"] = {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": False}
    cfg["eos_token"] = {"content": "<|eot_id|>", "special": True}
    cfg["unk_token"] = None
    cfg["pad_token"] = "<|pad|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    template = ChatTemplate.for_package(ModelPackage.open(folder))
    assert template.special_tokens == {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "pad_token": "<|pad|>",
    }
    assert template.render([ChatMessage("user", "Hi")], date_string="1 Jan 2025").startswith("<|begin_of_text|><|start")

    assert special_tokens_from_config({"bos_token": {"content": "<s>"}, "eos_token": 3, "mask_token": "<m>"}) == {
        "bos_token": "<s>",
        "mask_token": "<m>",
    }
    t = ChatTemplate(
        "{{ bos_token }}|{{ unk_token }}|{{ eos_token }}",
        special_tokens={"bos_token": {"content": "<s>"}, "unk_token": None},
    )
    assert t.render([ChatMessage("user", "x")]) == "<s>||"
    with pytest.raises(InvalidRequestError, match="special token 'eos_token'"):
        ChatTemplate("x", special_tokens={"eos_token": 2})


def test_builtin_template_unknown_name():
    with pytest.raises(ChatTemplateError, match="no built-in chat template 'nope.jinja'"):
        builtin_template("nope.jinja")
    assert "<|im_start|>" in builtin_template("chatml.jinja")


# ---------------------------------------------------------------------- rendering semantics
def test_template_variables_match_transformers_conventions():
    t = ChatTemplate(
        "{{ tools is none }}|{{ documents is none }}|{{ enable_thinking is defined }}|{{ add_generation_prompt }}|{{ extra }}"
    )
    msgs = [ChatMessage("user", "x")]
    assert t.render(msgs) == "True|True|False|True|"
    assert (
        t.render(msgs, tools=[], enable_thinking=False, add_generation_prompt=False, extra=1)
        == "True|True|True|False|1"
    )
    assert t.render(msgs, tools=[WEATHER], documents=[{"title": "a", "text": "b"}]) == "False|False|False|True|"


def test_tools_are_normalized_for_the_template():
    t = ChatTemplate("{% for t in tools %}{{ t | tojson }}{% endfor %}")
    bare = {"name": "f", "description": "Ünïcode <tag> & more", "parameters": {"type": "object", "properties": {}}}
    out = t.render([ChatMessage("user", "x")], tools=[bare])
    assert out == json.dumps({"type": "function", "function": bare}, ensure_ascii=False)


def test_tojson_filter_has_transformers_signature():
    t = ChatTemplate(
        "{{ messages[0].content | tojson }}|{{ {'b': 1, 'a': [1, 2]} | tojson(indent=2, sort_keys=True) }}|"
        "{{ {'a': 1} | tojson(separators=(',', ':')) }}|{{ 'é' | tojson(ensure_ascii=True) }}"
    )
    out = t.render([ChatMessage("user", "<é&>")])
    assert out == '"<é&>"|{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}|{"a":1}|"\\u00e9"'


def test_globals_and_generation_tag():
    t = ChatTemplate(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% if loop.index > 1 %}"
        "{% break %}{% endif %}{% endfor %}{{ ns.n }}|{{ dict(a=1) | tojson }}|{{ strftime_now('%Y') | length }}|"
        "{% generation %}{{ messages[-1].content }}{% endgeneration %}"
    )
    assert t.render([ChatMessage("user", "a"), ChatMessage("assistant", "b"), ChatMessage("user", "c")]) == (
        '2|{"a": 1}|4|c'
    )


def test_compiles_once_per_source():
    src = "{{ messages | length }}-cache-test"
    messages = [ChatMessage("user", "x")]
    compiled = compile_template.cache_info().misses
    a, b = ChatTemplate(src), ChatTemplate(src)
    assert compile_template.cache_info().misses == compiled  # opened, not compiled
    assert a.render(messages) == b.render(messages) == "1-cache-test"
    assert compile_template.cache_info().misses == compiled + 1  # one compilation for both
    assert ChatTemplate(src + " ").render(messages) == "1-cache-test "
    assert compile_template.cache_info().misses == compiled + 2


def test_reasoning_is_aliased_like_transformers():
    t = ChatTemplate("{% for m in messages %}{{ m.thinking }}/{{ m.reasoning_content }};{% endfor %}")
    assert t.render([ChatMessage("user", "q"), ChatMessage("assistant", "a", reasoning="why")]) == "/;why/why;"


def test_llama_tool_call_renders_arguments_as_json():
    t = template_file("llama-3.2-instruct.jinja", special_tokens=LLAMA_SPECIAL)
    msgs = [
        ChatMessage("user", "Weather?"),
        ChatMessage("assistant", tool_calls=[ToolCall("get_weather", {"city": "Paris"}, id="call_1")]),
        ChatMessage("tool", "sunny", tool_call_id="call_1", name="get_weather"),
    ]
    out = t.render(msgs, tools=[WEATHER], date_string="26 Jul 2024")
    assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in out
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"sunny"<|eot_id|>' in out


# ---------------------------------------------------------------------- errors
def test_empty_and_wrong_messages():
    t = template_file("qwen3.jinja")
    with pytest.raises(InvalidRequestError, match="no messages to render.*ChatMessage"):
        t.render([])
    with pytest.raises(InvalidRequestError, match="list of ChatMessage"):
        t.render(ChatMessage("user", "x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="message #0 is a dict"):
        t.render([{"role": "user", "content": "x"}])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        ([{"type": "function", "function": {"description": "no name"}}], "no function name"),
        ([{"name": "f", "parameters": {"type": "array"}}], "JSON schema"),
        (["get_weather"], "not a dict"),
        ({"name": "f"}, "list of tool definitions"),
    ],
)
def test_malformed_tools(tools, match):
    with pytest.raises(InvalidRequestError, match=match):
        template_file("qwen3.jinja").render([ChatMessage("user", "x")], tools=tools)


def test_raise_exception_becomes_chat_template_error():
    t = ChatTemplate("{{ raise_exception('System role not supported') }}", source_name="custom.jinja")
    with pytest.raises(ChatTemplateError) as info:
        t.render([ChatMessage("user", "x")])
    msg = str(info.value)
    assert "'custom.jinja'" in msg and "System role not supported" in msg
    assert "does not support the 'system' role" in msg
    assert info.value.template_message == "System role not supported"  # type: ignore[attr-defined]


def test_gemma_rejects_non_alternating_roles_with_a_hint():
    pkg = ModelPackage.open(TINY_GEMMA3)
    t = ChatTemplate.for_package(pkg)
    with pytest.raises(ChatTemplateError, match=r"alternate.*merge consecutive") as info:
        t.render([ChatMessage("user", "a"), ChatMessage("user", "b")])
    assert pkg.name in str(info.value)


def test_llama_rejects_two_tool_calls_with_a_hint():
    t = template_file("llama-3.2-instruct.jinja", special_tokens=LLAMA_SPECIAL)
    calls = [ToolCall("a", {}, "1"), ToolCall("b", {}, "2")]
    with pytest.raises(ChatTemplateError, match="single tool-calls.*one tool call per assistant message"):
        t.render([ChatMessage("user", "x"), ChatMessage("assistant", tool_calls=calls)], date_string="x")


def test_supports_system_role():
    strict = ChatTemplate(
        "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    assert strict.supports_system_role is False
    dropping = ChatTemplate("{% for m in messages %}{% if m.role != 'system' %}{{ m.content }}{% endif %}{% endfor %}")
    assert dropping.supports_system_role is False
    assert template_file("gemma-3-it.jinja").supports_system_role is True
    assert ChatTemplate("{{ raise_exception('always') }}").supports_system_role is True


def test_syntax_and_runtime_errors():
    with pytest.raises(ChatTemplateError, match=r"'broken.jinja' is not valid Jinja \(line 1"):
        ChatTemplate("{% for m in messages %}", source_name="broken.jinja")
    with pytest.raises(ChatTemplateError, match="is empty"):
        ChatTemplate("  ")
    t = ChatTemplate("{{ messages[0].content + 1 }}")
    with pytest.raises(ChatTemplateError, match=r"failed to render \(TypeError"):
        t.render([ChatMessage("user", "x")])
    t = ChatTemplate("{{ missing.attr }}")
    with pytest.raises(ChatTemplateError, match=r"UndefinedError.*render\(\.\.\., name=value\)"):
        t.render([ChatMessage("user", "x")])


def test_a_template_nested_deeper_than_python_compiles_is_named_as_such():
    """Valid Jinja that Python cannot compile (more than 20 nested blocks): a template error, not a render error."""
    deep = "".join(f"{{% for x{i} in messages %}}" for i in range(24)) + "x" + "{% endfor %}" * 24
    t = ChatTemplate(deep, source_name="deep.jinja")  # it parses
    with pytest.raises(ChatTemplateError, match=r"'deep.jinja' cannot be compiled \(SyntaxError"):
        t.render([ChatMessage("user", "x")])


@pytest.mark.parametrize(
    "payload",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__.os }}",
        "{{ self._TemplateReference__context }}",
        "{{ self.__init__.__globals__ }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ messages[0]['__class__'] }}",
        "{{ namespace.__init__.__globals__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ ().__class__.__base__.__subclasses__() }}",
        "{{ messages.append(1) }}",
        "{% set ns = namespace(_private=1) %}",
        "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
        "{{ '{0.__class__}'.format(messages) }}",
        "{{ dict.__call__.__globals__ }}",
    ],
)
def test_sandbox_payloads_raise(payload):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(payload).render([ChatMessage("user", "x")])


# ---------------------------------------------------------------------- family markers
def test_family_markers():
    assert FAMILIES == ("llama3", "qwen3", "gemma3", "chatml", "plain")
    assert end_of_turn_markers("llama3") == ["<|eot_id|>", "<|eom_id|>"]
    assert end_of_turn_markers("qwen3") == end_of_turn_markers("chatml") == ["<|im_end|>"]
    assert end_of_turn_markers("gemma3") == ["<end_of_turn>"]
    assert tool_call_markers("qwen3") == tool_call_markers("chatml") == ("<tool_call>", "</tool_call>")
    assert tool_call_markers("llama3") is None and tool_call_markers("gemma3") is None
    assert reasoning_markers("qwen3") == ("<think>", "</think>")
    assert all(reasoning_markers(f) is None for f in ("llama3", "gemma3", "chatml"))
    assert family_for_model_type("llama") == "llama3"
    assert family_for_model_type("qwen3") == "qwen3"
    assert family_for_model_type("gemma3_text") == "gemma3"
    assert family_for_model_type("qwen2") is family_for_model_type("decoder") is None  # not known here
    assert end_of_turn_markers("plain") == [] and tool_call_markers("plain") is reasoning_markers("plain") is None
    assert not has_tool_calls("plain") and parse_tool_calls('{"name": "f", "parameters": {}}', "plain")[1] == []
    assert infer_family(builtin_template("qwen3.jinja")) == "qwen3"
    assert infer_family(builtin_template("chatml.jinja")) == "chatml"
    assert infer_family("plain") is None
    t = template_file("qwen3.jinja")
    assert t.end_of_turn == ["<|im_end|>"]
    assert t.tool_call_markers == ("<tool_call>", "</tool_call>")
    assert t.reasoning_markers == ("<think>", "</think>")
    with pytest.raises(InvalidRequestError, match="template family 'gpt' is not known; use one of llama3, qwen3, "):
        tool_call_markers("gpt")


# ---------------------------------------------------------------------- output parsing
def test_parse_qwen_tool_calls():
    text = (
        'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n</tool_call>'
    )
    content, calls = parse_tool_calls(text, "qwen3")
    assert content == "I will check."
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Zürich"}), ("add", {"a": 1, "b": 2})]
    assert all(c.id.startswith("call_") and len(c.id) == 17 for c in calls)
    assert calls[0].id != calls[1].id
    assert parse_tool_calls(text, "chatml")[1] == calls  # same ids: deterministic
    # a call cut off before </tool_call> still counts; no arguments means {}
    assert parse_tool_calls('<tool_call>\n{"name": "now"}', "qwen3")[1][0].arguments == {}


def test_parse_qwen_invalid_blocks_stay_content():
    text = "Answer <tool_call>\n{not json}\n</tool_call> end"
    assert parse_tool_calls(text, "qwen3") == (text, [])
    mixed = 'x <tool_call>{bad}</tool_call> <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls(mixed, "qwen3")
    assert content == "x <tool_call>{bad}</tool_call>"
    assert [c.name for c in calls] == ["f"]
    assert parse_tool_calls("no calls here\n", "qwen3") == ("no calls here\n", [])
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "qwen3")[1] == []


def test_parse_llama_tool_calls():
    content, calls = parse_tool_calls('{"name": "get_weather", "parameters": {"city": "Paris"}}', "llama3")
    assert content == ""
    assert calls == [ToolCall("get_weather", {"city": "Paris"}, calls[0].id)]
    assert calls[0].id.startswith("call_")

    content, calls = parse_tool_calls(
        '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": "{\\"y\\": 2}"}\n'
        '{"name": "c", "parameters": {}}<|eom_id|>',
        "llama3",
    )
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2}), ("c", {})]
    assert len({c.id for c in calls}) == 3
    assert [
        c.name
        for c in parse_tool_calls('[{"name": "a", "parameters": {}}, {"name": "b", "parameters": {}}]', "llama3")[1]
    ] == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        "Paris is the capital of France.",
        '{"name": "get_weather", "parameters": {"city": "Paris"}',  # truncated
        '{"name": "get_weather", "parameters": {"city": "Paris"}} and some prose',
        '{"name": "Bob", "age": 3}',  # a JSON answer, not a call: no parameters
        '{"name": "f", "parameters": "not json"}',
        "",
    ],
)
def test_parse_llama_plain_content(text):
    assert parse_tool_calls(text, "llama3") == (text, [])


def test_parse_tool_calls_with_known_tool_names():
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert parse_tool_calls(text, "llama3", tool_names={"other"}) == (text, [])
    assert len(parse_tool_calls(text, "llama3", tool_names=["get_weather"])[1]) == 1
    assert parse_tool_calls('<tool_call>{"name": "x"}</tool_call>', "gemma3") == (
        '<tool_call>{"name": "x"}</tool_call>',
        [],
    )


def _parse_whole(template: ChatTemplate, text: str) -> tuple[str, str, list[ToolCall]]:
    """(reasoning, content, calls) of a whole answer, read as a generation reads it."""
    parser = OutputParser(
        reasoning_markers=template.reasoning_markers,
        tool_markers=template.tool_call_markers,
        json_tool_calls=template.tool_call_markers is None,
        parse_tool_calls=functools.partial(parse_tool_calls, family=template.family),
    )
    content, reasoning = parser.feed(text)
    more, more_reasoning = parser.finish()
    return reasoning + more_reasoning, content + more, parser.tool_calls


def test_output_per_family_is_read_by_the_generation_parser():
    qwen = template_file("qwen3.jinja")
    reasoning, content, calls = _parse_whole(
        qwen,
        '<think>\nNeed weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    )
    assert reasoning == "Need weather." and content == ""
    assert [c.name for c in calls] == ["get_weather"]

    llama = template_file("llama-3.2-instruct.jinja")
    reasoning, content, calls = _parse_whole(llama, '<think>x</think>{"name": "f", "parameters": {}}')
    assert reasoning == "" and calls == []  # no reasoning format: the text stays whole
    assert content == '<think>x</think>{"name": "f", "parameters": {}}'
    assert _parse_whole(llama, '{"name": "f", "parameters": {}}')[2][0].name == "f"
